/**
 * The cluster's instances are processes with ports of their own, checked by HAProxy on their
 * service ports: one ADMIN_PORT for all of them is refused before anything starts.
 */
import t from 'tap'
import { startCluster } from '../../tools/cluster.js'

t.test('ADMIN_PORT is refused, naming the variable, before PgBouncer or an instance starts', async (t) => {
  const outcome = await startCluster({ dbUrl: 'postgres://postgres@127.0.0.1:1/none', env: { ADMIN_PORT: '0' } })
    .then(async (cluster) => { await cluster.stop(); return 'started' }, (err: Error) => err.message)
  t.match(outcome, /^ADMIN_PORT is not for the cluster: .*unset it/)
})
