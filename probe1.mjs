const a = process.cpuUsage()
await import(process.argv[2])
const u = process.cpuUsage(a)
console.log(process.argv[2], 'cpu', ((u.user+u.system)/1000).toFixed(0))
