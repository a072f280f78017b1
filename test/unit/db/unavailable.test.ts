/**
 * `isDatabaseUnavailable`: which errors mean "the database cannot serve us right now" (503)
 * rather than "this query is wrong" (500).
 */
import t from 'tap'
import { isDatabaseUnavailable } from '../../../src/db/unavailable.js'

t.test('the SQLSTATEs of a lost, overloaded, stopping or refusing database count as unavailable', async (t) => {
  for (const [code, meaning] of [
    ['08000', 'connection exception'],
    ['08003', 'connection does not exist'],
    ['08006', 'connection failure'],
    ['08001', 'cannot establish connection'],
    ['08004', 'server rejected the connection'],
    ['53000', 'insufficient resources'],
    ['53100', 'disk full'],
    ['53200', 'out of memory'],
    ['53300', 'too many connections'],
    ['57P01', 'admin shutdown'],
    ['57P02', 'crash shutdown'],
    ['57P03', 'cannot connect now'],
    ['57P04', 'database dropped'],
    ['57P05', 'idle session timeout'],
    ['57014', 'statement timeout'],
    ['25006', 'read-only SQL transaction (a standby, or a demoted primary)'],
    ['55000', 'object not in prerequisite state (not accepting connections)'],
    ['3D000', 'invalid catalog name (database gone)'],
    ['28000', 'invalid authorization specification'],
    ['28P01', 'invalid password']
  ]) {
    t.ok(isDatabaseUnavailable({ code, message: 'whatever' }), `${code} ${meaning}`)
  }
})

t.test('the SQLSTATEs of a wrong query or wrong data do not', async (t) => {
  for (const [code, meaning] of [
    ['23505', 'unique violation'],
    ['23502', 'not null violation'],
    ['22003', 'numeric value out of range'],
    ['22P02', 'invalid text representation'],
    ['42601', 'syntax error'],
    ['42P01', 'undefined table'],
    ['40001', 'serialization failure'],
    ['40P01', 'deadlock detected'],
    ['57000', 'operator intervention, not a shutdown'],
    ['57P', 'a truncated code'],
    ['55P03', 'lock not available'],
    ['25P02', 'in failed SQL transaction (same class as read-only)'],
    ['25001', 'active SQL transaction'],
    ['3D001', 'no such SQLSTATE, close to 3D000'],
    ['XX000', 'internal error'],
    ['', 'an empty code']
  ]) {
    t.notOk(isDatabaseUnavailable({ code, message: 'whatever' }), `${JSON.stringify(code)} ${meaning}`)
  }
})

t.test('an unavailable SQLSTATE counts only at the start of the code', async (t) => {
  for (const code of ['X08000', '1053000', 'P57014', '055000', 'A3D000', '028000']) {
    t.notOk(isDatabaseUnavailable({ code }), code)
  }
})

t.test('the socket codes of an unreachable or vanished server, or of no descriptor left for one, count as unavailable', async (t) => {
  for (const code of ['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENOTFOUND', 'EPIPE', 'EMFILE', 'ENFILE']) {
    t.ok(isDatabaseUnavailable({ code }), code)
  }
})

t.test('other error codes do not, nor a socket code in another case or with more around it', async (t) => {
  for (const code of ['EACCES', 'ENOENT', 'EADDRINUSE', 'ERR_INVALID_ARG_TYPE', 'econnrefused', 'ECONNREFUSED2', 'XECONNRESET']) {
    t.notOk(isDatabaseUnavailable({ code }), code)
  }
})

t.test('node-postgres messages of a dead, unmade or silent connection count as unavailable, code or not', async (t) => {
  for (const message of [
    'Connection terminated',
    'Connection terminated unexpectedly',
    'Connection terminated due to connection timeout',
    'timeout exceeded when trying to connect',
    'timeout expired',
    'Client has encountered a connection error and is not queryable',
    'Query read timeout'
  ]) {
    t.ok(isDatabaseUnavailable({ message }), message)
    t.ok(isDatabaseUnavailable({ code: undefined, message }), `${message}, code undefined`)
  }
})

t.test('those messages count only at the start, and "timeout expired" only as the whole message', async (t) => {
  for (const message of [
    'Error: Connection terminated',
    'connection terminated',
    'the timeout expired',
    'timeout expired while reading',
    'query read timeout',
    ' Query read timeout'
  ]) {
    t.notOk(isDatabaseUnavailable({ message }), message)
  }
})

t.test('an error of a wrong query, or with neither code nor message, does not count', async (t) => {
  t.notOk(isDatabaseUnavailable({ code: '42601', message: 'syntax error at or near "SELEC"' }))
  t.notOk(isDatabaseUnavailable(new Error('Cannot read properties of undefined')))
  t.notOk(isDatabaseUnavailable({}))
})

t.test('an error counts when either its code or its message says so', async (t) => {
  t.ok(isDatabaseUnavailable({ code: '42601', message: 'Connection terminated' }), 'message says so, code does not')
  t.ok(isDatabaseUnavailable({ code: '57P01', message: 'syntax error' }), 'code says so, message does not')
  t.ok(isDatabaseUnavailable(Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' })), 'a real Error from net')
})
