import t from 'tap'
import { build, getToken, call } from './helper.js'

t.test('smoke', async (t) => {
  const app = await build(t)
  const token = await getToken(app)
  const created = await call(app, token, { method: 'POST', url: '/book', payload: { title: 'A', author: 'B', year: 1999 } })
  t.same(created.body, { status: 201, message: 'Book created successfully', data: { id: 1, title: 'A', author: 'B', year: 1999 } })
})
