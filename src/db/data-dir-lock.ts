import fs from 'node:fs'
import path from 'node:path'

/**
 * One process at a time on an embedded database's directory. PostgreSQL refuses a second server
 * on a data directory through its `postmaster.pid`; PGlite writes that file with a made-up pid
 * and never reads it, so two processes on one directory (a second `npm run dev` in another
 * terminal) would both write the cluster and corrupt it.
 *
 * The lock is a file beside the directory (`<directory>.lock`: inside it, PGlite would take a
 * new directory for an existing cluster) holding the owner's pid. A lock whose process is gone
 * (killed, the machine restarted) is taken over. Two processes taking over the same stale lock
 * at the same instant could both succeed; everything else is refused. Returns the release,
 * which also runs when the process exits.
 */
export function lockDataDir (dataDir: string): () => void {
  const lockFile = `${dataDir}.lock`
  fs.mkdirSync(path.dirname(dataDir), { recursive: true })
  for (;;) {
    try {
      fs.writeFileSync(lockFile, `${process.pid}\n`, { flag: 'wx' })
      break
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err
    }
    const holder = Number.parseInt(readOrEmpty(lockFile), 10)
    if (Number.isInteger(holder) && holder > 0 && holder !== process.pid && isRunning(holder)) {
      throw new Error(`it is in use by process ${holder}; stop that process, or set DB_URL to another directory (if that process is not this service, delete ${lockFile})`)
    }
    // Its process is gone: the lock is stale
    fs.rmSync(lockFile, { force: true })
  }
  const release = () => {
    process.off('exit', release)
    if (readOrEmpty(lockFile) === `${process.pid}\n`) fs.rmSync(lockFile, { force: true })
  }
  process.on('exit', release)
  return release
}

function readOrEmpty (file: string): string {
  try {
    return fs.readFileSync(file, 'utf8')
  } catch {
    return ''
  }
}

function isRunning (pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (err) {
    // EPERM: it runs, as another user
    return (err as NodeJS.ErrnoException).code === 'EPERM'
  }
}
