'use strict'

module.exports = require('neostandard')({
  ts: true,
  ignores: ['dist/**', 'coverage/**', '.tap/**']
})
