import { Type, type Static } from '@sinclair/typebox'

/** How long a token this service issues is valid, in seconds: the contract's 15 minutes. */
export const TOKEN_LIFETIME_S = 15 * 60

/** The algorithms a token is verified with: the HMAC family, of which the service signs HS256. */
export const TOKEN_ALGORITHMS = ['HS256', 'HS384', 'HS512'] as const

export const LoginSchema = Type.Object({
  username: Type.String(),
  password: Type.String()
})

export const TokenSchema = Type.Object({
  token: Type.String()
})

export type Login = Static<typeof LoginSchema>
