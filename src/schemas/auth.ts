import { Type, type Static } from '@sinclair/typebox'

export const LoginSchema = Type.Object({
  username: Type.String(),
  password: Type.String()
})

export const TokenSchema = Type.Object({
  token: Type.String()
})

export type Login = Static<typeof LoginSchema>
