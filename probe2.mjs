import { startEmbedded } from './dist/src/db/embedded.js'
const fs = await import('node:fs')
const t0 = performance.now()
const r0 = process.resourceUsage()
const s = await startEmbedded('memory', (e) => console.error(e))
await s.stop()
// children cpu: read /proc/self/stat cutime/cstime
const st = fs.readFileSync('/proc/self/stat', 'utf8').replace(/^.*\) /s, '').split(' ')
const r = process.cpuUsage()
console.log('wall', (performance.now() - t0).toFixed(0), 'self cpu', ((r.user + r.system) / 1000).toFixed(0), 'children cpu ms', (Number(st[13]) + Number(st[14])) * 10)
