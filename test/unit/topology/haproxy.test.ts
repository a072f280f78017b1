/**
 * `checkTimings`: the health-check timings read from a HAProxy configuration, HAProxy's own
 * defaults for those not set, and the times they give an instance to leave and rejoin.
 */
import t from 'tap'
import { checkTimings } from '../../../tools/topology/haproxy.js'

t.test('the timings of the default-server line, in any unit HAProxy takes', async (t) => {
  const timings = checkTimings('backend b\n    default-server inter 2s fastinter 500ms downinter 3000 fall 3 rise 4\n')
  t.strictSame(timings, {
    inter: 2000,
    fastinter: 500,
    downinter: 3000,
    fall: 3,
    rise: 4,
    // The check due after at most `inter` fails, two more follow every `fastinter`
    markedDownWithin: 2000 + 2 * 500,
    markedUpWithin: 3000 + 3 * 500
  })
})

t.test("HAProxy's defaults where the line says nothing", async (t) => {
  const timings = checkTimings('backend b\n    server app1 127.0.0.1:1 check\n')
  t.strictSame(timings, { inter: 2000, fastinter: 2000, downinter: 2000, fall: 3, rise: 2, markedDownWithin: 6000, markedUpWithin: 4000 })
})

t.test('a time HAProxy would not take is an error, not a guess', async (t) => {
  t.throws(() => checkTimings('default-server inter 2sec'), /not a HAProxy time: 2sec/)
})
