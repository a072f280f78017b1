'use strict'

module.exports = require('neostandard')({
  ts: true,
  // The generated client types keep openapi-typescript's own style (npm run client:types)
  ignores: ['dist/**', 'coverage/**', '.tap/**', 'src/console/bookkeeping-api.d.ts']
})
