import { Type, type Static } from '@sinclair/typebox'

/** How long a token this service issues is valid, in seconds: the contract's 15 minutes. */
export const TOKEN_LIFETIME_S = 15 * 60

export const LoginSchema = Type.Object({
  username: Type.String(),
  password: Type.String()
})

export const TokenSchema = Type.Object({
  token: Type.String()
})

export type Login = Static<typeof LoginSchema>
