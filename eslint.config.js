import neostandard from 'neostandard'

export default neostandard({
  ts: true,
  // The generated client types keep openapi-typescript's own style (npm run client:types)
  ignores: ['dist/**', 'tools/dist/**', '.test-build/**', 'coverage/**', '.tap/**', 'console/bookkeeping-api.d.ts']
})
