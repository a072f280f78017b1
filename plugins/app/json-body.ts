/**
 * Adds the parser of `application/json` bodies, in place of Fastify's, on every route that reads
 * one. Before Fastify's own JSON parser (same limits, same `__proto__` refusal), it refuses what
 * that parser would misread: a `Content-Encoding` other than `identity` and a `charset` other
 * than UTF-8 are `415 Unsupported media type` (RFC 9110 section 15.5.16); bytes that are not
 * UTF-8, and strings with a lone surrogate, are 400 with the route's message. Nothing is stored
 * from such a body.
 *
 * Also the parser of every other media type, which refuses it (415, as Fastify does without a
 * parser), but for one case: a request that sends no body (neither `Transfer-Encoding` nor a
 * `Content-Length` other than 0) to a route that takes none (DELETE /book/<id>) or to no route
 * is answered as the same request without `Content-Type`, whatever its `Content-Type` says
 * (Fastify parses any request that has the header). A route that takes a body still refuses an
 * empty one as before.
 */
import { errorCodes, type FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { isIdentityCoding, isUtf8Charset, isWellFormedJson } from '../../src/body-text.js'

/**
 * A JSON string holding a lone surrogate (`"\ud800"`): valid JSON text, but not Unicode text
 * (I-JSON, RFC 7493 section 2.1, forbids it). node-postgres would store it as U+FFFD, not as sent.
 * A 400, answered with the route's message for a body it cannot parse.
 */
class IllFormedUnicodeError extends Error {
  readonly statusCode = 400
  readonly code = 'BOOKKEEPING_ILL_FORMED_UNICODE'
  constructor () {
    super('a JSON string of the body is not well-formed Unicode (a lone surrogate)')
  }
}

/** UTF-8 only; a byte sequence that is not UTF-8 throws instead of becoming U+FFFD. Drops a BOM. */
const utf8 = new TextDecoder('utf-8', { fatal: true })

/**
 * Once the text itself is well-formed, a lone surrogate can only come from an escape in
 * `\uD800` to `\uDFFF`. Only a body with one (rare) is searched string by string.
 */
const SURROGATE_ESCAPE = /\\u[dD][89a-fA-F]/

/** Whether the request sends no body: RFC 9112 section 6.3, no `Transfer-Encoding` and no `Content-Length` above 0. */
function sendsNoBody (request: FastifyRequest): boolean {
  const length = request.headers['content-length']
  return request.headers['transfer-encoding'] === undefined && (length === undefined || length === '0')
}

/** Whether the request's route reads no body (no body schema), or no route matched it. */
function takesNoBody (request: FastifyRequest): boolean {
  return request.is404 || request.routeOptions.schema?.body === undefined
}

export default fp(async function jsonBody (fastify) {
  const { onProtoPoisoning = 'error', onConstructorPoisoning = 'error' } = fastify.initialConfig
  const parseJson = fastify.getDefaultJsonParser(onProtoPoisoning, onConstructorPoisoning)

  fastify.removeContentTypeParser('application/json')
  fastify.addContentTypeParser('application/json', { parseAs: 'buffer' }, function (request: FastifyRequest, body, done) {
    if (sendsNoBody(request) && takesNoBody(request)) {
      done(null, undefined)
      return
    }
    if (!isIdentityCoding(request.headers['content-encoding']) || !isUtf8Charset(request.headers['content-type'])) {
      done(new errorCodes.FST_ERR_CTP_INVALID_MEDIA_TYPE(), undefined)
      return
    }
    let text: string
    try {
      text = utf8.decode(body as Buffer)
    } catch {
      done(new errorCodes.FST_ERR_CTP_INVALID_JSON_BODY(), undefined)
      return
    }
    parseJson(request, text, (error, value) => {
      if (error === null && SURROGATE_ESCAPE.test(text) && !isWellFormedJson(value)) {
        done(new IllFormedUnicodeError(), undefined)
        return
      }
      done(error, value)
    })
  })

  // Every other media type. Nothing is read: the body of a request it refuses stays unread, as
  // with no parser at all, and a request to no route goes on to its 404 as before
  fastify.addContentTypeParser('*', function (request: FastifyRequest, _payload, done) {
    if (request.is404 || (sendsNoBody(request) && takesNoBody(request))) done(null, undefined)
    else done(new errorCodes.FST_ERR_CTP_INVALID_MEDIA_TYPE(request.headers['content-type']), undefined)
  })
}, { name: 'json-body' })
