'use strict'
/**
 * `npm run bench:console`: the web console (/console/) in a real browser on long lists, which it
 * reads in pages (past 100,000 books; docs/console.md). Per size (1,000,000 and 10,000,000 books
 * by default), ROUNDS times (default 3, medians and the slowest reported), each in a fresh
 * browser context:
 *
 * - sign in through the form: the time from the click on Sign in to the first book rows drawn
 *   (the page streams the list at first), and to the first rows of the list in pages;
 * - the JavaScript heap once in pages, after a forced collection;
 * - filters typed one key at a time (80 ms apart): the time from the last key to the first
 *   results drawn (the page's `filter-results` measure, its wait after the last key included);
 * - a steady fast scroll with the wheel (about 330 rows a second for 5 s): how many of the frames
 *   drawn meanwhile had rows not read yet (placeholders) in the DOM;
 * - a far scroll: the list scrolled to its bottom again and again (FAR_SCROLLS times), each time
 *   until the rows in sight are drawn, rather than placeholders; the longest task of the page's
 *   thread meanwhile; how deep it got; the heap after it; and back to the top, where the first
 *   pages, dropped meanwhile, are read again;
 * - sorting by title: the click to the rows drawn.
 *
 * The reference, up to 1,000,000 books, in the same browser, in a fresh context of its own: the
 * naive page, `await (await fetch('/books')).json()`, which holds every book (10,000,000 books
 * are a 1 GB answer, more than a page can parse).
 *
 * The books are those of `npm run bench:list` (tools/bench/common.cjs, `listDatabase`), in its
 * kept databases `bookkeeping_bench_list_<books>`: up to 1,000,000 books this benchmark seeds one
 * when it is missing (the service builds its indexes when it starts on it, which takes a minute
 * or two); a larger one must have been made by `BENCH_LIST_BOOKS=<books> npm run bench:list`.
 * The filters are that seed's: `night` (in one title of 25), `quixotic` (20 titles), `tolkien`
 * (one author of 500), `qzx` (nothing).
 *
 *   npm run bench:console                                   # 1,000,000 and 10,000,000 books
 *   npm run build && node tools/bench/console.cjs 1000000     # sizes as an argument (commas allowed)
 *
 * Environment: ROUNDS (default 3), FAR_SCROLLS (default 100), TEST_DB_URL (the server, default
 * postgres://postgres@127.0.0.1:5432/postgres), CHROMIUM (default /usr/bin/chromium).
 *
 * The service is started as `npm start` starts it (tools/bench/common.cjs), on a port the system
 * gives (PORT=0, read from its "Server listening at" log line). A script, not a test: it prints
 * figures and exits 0 when it ran, whatever it found; 1 only when it could not run.
 */
const { spawn } = require('node:child_process')
const { randomBytes } = require('node:crypto')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const readline = require('node:readline')
const { chromium } = require('playwright-core')
const {
  ROOT, USERNAME, PASSWORD, admin, issueToken, listDatabase, markdownTable, median, readMemory, request, runBenchmark,
  serviceCommand, stopChild
} = require('./common.cjs')

const SIZES = parseSizes(process.argv.slice(2).join(',') || '1000000,10000000')
const ROUNDS = Number(process.env.ROUNDS ?? 3)
const FAR_SCROLLS = Number(process.env.FAR_SCROLLS ?? 100)
const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium'
const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync']

/** Up to this many books the benchmark seeds its database; a larger one is made by bench:list. */
const SEEDS_UP_TO = 1_000_000
/** The console reads the list in pages past this many books (console/list-view.ts). */
const PAGED_ABOVE = 100_000
/** Up to this many books the naive page is measured too. */
const NAIVE_UP_TO = 1_000_000
/** Words of LIST_SEED's titles and authors (tools/bench/common.cjs), and one that nothing has. */
const FILTERS = ['night', 'quixotic', 'tolkien', 'qzx']
/** Between keys, a fast typist's pace */
const KEY_DELAY_MS = 80
/** A steady fast scroll: 600 px (about 17 rows) every 50 ms, some 330 rows a second, for 5 s */
const WHEEL_STEPS = 100
const WHEEL_PX = 600
const WHEEL_INTERVAL_MS = 50
/** What the console aims at (docs/console.md, Figures) */
const FIRST_ROWS_TARGET_MS = 300
const FILTER_TARGET_MS = 300
const HEAP_TARGET_BYTES = 100e6

/** A service on a table whose indexes it builds first takes a while to listen. */
const START_TIMEOUT_MS = 30 * 60_000
const ACTION_TIMEOUT_MS = 120_000
const MB = 1e6

const COUNT = new Intl.NumberFormat('en-US')
const group = (n) => COUNT.format(n)

function parseSizes (text) {
  const sizes = text.split(',').map((part) => part.trim().replace(/_/g, '')).filter((part) => part !== '')
  for (const size of sizes) {
    if (!/^[1-9]\d*$/.test(size)) {
      console.error(`sizes: "${size}" is not a positive whole number (given: ${text})`)
      process.exit(1)
    }
  }
  return [...new Set(sizes.map(Number))].sort((a, b) => a - b)
}

// --- the service ------------------------------------------------------------------------------

/** `npm start` on PORT=0; resolves once its "Server listening at" line says where. */
async function startService (bench, dbUrl) {
  const { start, command, args, env } = serviceCommand({
    DB_URL: dbUrl,
    SECRET_TOKEN: randomBytes(36).toString('base64url'),
    PORT: '0',
    // info: the "Server listening at" line, and the migrations applied
    LOG_LEVEL: 'info',
    TOKEN_RATE_LIMIT: '1000000',
    TOKEN_USERNAME_RATE_LIMIT: '1000000'
  })
  const started = performance.now()
  const child = bench.track(spawn(command, args, { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] }))
  const service = { child, start, port: null, url: null, recent: [], complaints: [], migrations: 0, startSeconds: null }
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the service did not log "Server listening at" within ${START_TIMEOUT_MS} ms\n${service.recent.join('\n')}`)), START_TIMEOUT_MS)
    for (const stream of [child.stdout, child.stderr]) {
      readline.createInterface({ input: stream }).on('line', (line) => {
        service.recent.push(line)
        if (service.recent.length > 50) service.recent.shift()
        if (line.includes('"applied migration"')) service.migrations++
        const listening = /Server listening at http:\/\/127\.0\.0\.1:(\d+)/.exec(line)
        if (listening !== null && service.port === null) {
          clearTimeout(timer)
          resolve(Number(listening[1]))
        }
        // Warnings and errors, and whatever is not a JSON log line, are reported at the end
        let level = 60
        try {
          level = JSON.parse(line).level
        } catch {}
        if (level >= 40 && service.complaints.length < 50) service.complaints.push(line.slice(0, 300))
      })
    }
    child.once('exit', (code, signal) => {
      clearTimeout(timer)
      reject(new Error(`the service exited (${code ?? signal}) before it listened\n${service.recent.join('\n')}`))
    })
  })
  service.port = port
  service.url = `http://127.0.0.1:${port}`
  service.startSeconds = (performance.now() - started) / 1000
  return service
}

// --- the page ---------------------------------------------------------------------------------

/**
 * Put in every page before its scripts: when Sign in was clicked (the click's timestamp, so the
 * page's own measures can be read from it), and every long task of the page's thread.
 */
function pageProbe () {
  window.benchLongTasks = []
  new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) window.benchLongTasks.push({ start: entry.startTime, duration: entry.duration })
  }).observe({ type: 'longtask' })
  window.addEventListener('click', (event) => {
    if (event.target?.closest?.('button')?.textContent === 'Sign in') window.benchSignIn = event.timeStamp
  }, true)
}

/** A fresh context and page whose errors, warnings and failed requests are gathered in `log`. */
async function openPage (browser, log, label) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 }, locale: 'en-US' })
  context.setDefaultTimeout(ACTION_TIMEOUT_MS)
  const page = await context.newPage()
  page.on('console', (message) => {
    if (message.type() === 'error' || message.type() === 'warning') log.push(`${label}: console.${message.type()}: ${message.text().slice(0, 300)}`)
  })
  page.on('pageerror', (err) => log.push(`${label}: uncaught: ${err.message.slice(0, 300)}`))
  // A request the page cancelled (the list read whole, at the switch to pages) is the design, not a failure
  page.on('requestfailed', (request) => {
    if (request.failure()?.errorText !== 'net::ERR_ABORTED') log.push(`${label}: request failed: ${request.method()} ${request.url()}: ${request.failure()?.errorText}`)
  })
  page.on('crash', () => log.push(`${label}: THE PAGE CRASHED`))
  return { context, page }
}

/** The renderers' CPU times by pid (for finding the page's renderer: the one that worked). */
async function rendererTimes (browserSession) {
  const { processInfo } = await browserSession.send('SystemInfo.getProcessInfo')
  return new Map(processInfo.filter(({ type }) => type === 'renderer').map(({ id, cpuTime }) => [id, cpuTime]))
}

/**
 * The page's JavaScript heap after a forced collection, its DOM node count, and the resident
 * memory of its renderer process: the renderer that used the most CPU since `before`.
 */
async function pageMemory (context, page, browserSession, before) {
  const cdp = await context.newCDPSession(page)
  await cdp.send('HeapProfiler.collectGarbage')
  await cdp.send('HeapProfiler.collectGarbage')
  await cdp.send('Performance.enable')
  const { metrics } = await cdp.send('Performance.getMetrics')
  const metric = (name) => metrics.find((m) => m.name === name)?.value ?? null
  let rss = null
  try {
    const after = await rendererTimes(browserSession)
    let busiest = null
    for (const [pid, cpu] of after) {
      const used = cpu - (before.get(pid) ?? 0)
      if (busiest === null || used > busiest.used) busiest = { pid, used }
    }
    if (busiest !== null) rss = readMemory(busiest.pid)?.rss ?? null
  } catch {}
  await cdp.detach().catch(() => {})
  return { heap: metric('JSHeapUsedSize'), nodes: metric('Nodes'), rss }
}

/** The durations of the page's measures named `name`, in order. */
const measures = (page, name) => page.evaluate((name) => performance.getEntriesByName(name, 'measure').map((m) => m.duration), name)

/** Waits until the page has `count` measures named `name`; the last one's duration. */
async function nextMeasure (page, name, count) {
  await page.waitForFunction(([name, count]) => performance.getEntriesByName(name, 'measure').length >= count, [name, count], { polling: 20 })
  return (await measures(page, name)).at(-1)
}

/**
 * The duration of the page's `filter-results` measure for `filter`, from the last key typed: a
 * list read for a text typed on the way (had a key come late) is told apart by its `detail`.
 */
async function filterResults (page, filter) {
  const handle = await page.waitForFunction((filter) => {
    const lastKey = performance.getEntriesByName('filter-start', 'mark').at(-1)
    const measure = performance.getEntriesByName('filter-results', 'measure')
      .filter((entry) => entry.detail?.filter === filter && entry.startTime === lastKey?.startTime).at(-1)
    return measure === undefined ? false : measure.duration
  }, filter, { polling: 20 })
  return handle.jsonValue()
}

/**
 * Resolves once the rows in sight are drawn as books, not placeholders being read: checked from
 * the second frame on, the first being the one whose drawing a scroll just asked for.
 */
function rowsDrawn (page) {
  return page.evaluate(() => new Promise((resolve) => {
    let frames = 0
    const check = () => {
      frames++
      const drawn = document.querySelector('#books tbody tr.placeholder') === null && document.querySelector('#books tbody tr.book') !== null
      if (frames >= 2 && drawn) resolve()
      else window.requestAnimationFrame(check)
    }
    window.requestAnimationFrame(check)
  }))
}

/** The deepest row drawn (its place in the list, from 0). */
const deepestRow = (page) => page.evaluate(() => Math.max(0, ...[...document.querySelectorAll('#books tbody tr.book')]
  .map((row) => Number(row.getAttribute('aria-rowindex')) - 2)))

/** One round of the console: sign in, the switch to pages, memory, filters, a far scroll, a sort. */
async function consoleRound (browser, browserSession, service, size, log) {
  const label = `console ${group(size)}`
  const { context, page } = await openPage(browser, log, label)
  try {
    await page.addInitScript(pageProbe)
    await page.goto(`${service.url}/console/`)
    await page.getByLabel('Username').fill(USERNAME)
    await page.getByLabel('Password').fill(PASSWORD)
    const before = await rendererTimes(browserSession)
    await page.getByRole('button', { name: 'Sign in', exact: true }).click()
    // From the click: the end of the page's `first-rows` measure, and of `first-page`
    await nextMeasure(page, 'first-rows', 1)
    const paged = size > PAGED_ABOVE
    if (paged) await nextMeasure(page, 'first-page', 1)
    const signIn = await page.evaluate(() => {
      const end = (name) => {
        const [entry] = performance.getEntriesByName(name, 'measure')
        return entry === undefined ? null : entry.startTime + entry.duration - window.benchSignIn
      }
      const [listStart] = performance.getEntriesByName('list-start', 'mark')
      return { signedIn: listStart.startTime - window.benchSignIn, firstRows: end('first-rows'), firstPage: end('first-page') }
    })
    const expected = paged ? `More than ${group(PAGED_ABOVE)} books` : `${group(size)} books`
    await page.waitForFunction((expected) => document.getElementById('count').textContent === expected, expected, { polling: 50 })
    const pageToken = await page.evaluate(() => sessionStorage.getItem('bookkeeping.token'))
    const signInLongestTask = await page.evaluate(() => Math.max(0, ...window.benchLongTasks.map((task) => task.duration)))
    const memory = await pageMemory(context, page, browserSession, before)

    // Typed one key at a time into the Filter box; the first results after the last key
    const filters = []
    const filterBox = page.getByRole('searchbox', { name: 'Filter' })
    for (const query of FILTERS) {
      await filterBox.focus()
      await page.keyboard.type(query, { delay: KEY_DELAY_MS })
      const results = await filterResults(page, query)
      const count = await page.evaluate(() => document.getElementById('count').textContent)
      filters.push({ query, results, count })
      // Cleared: the whole list again, from its top
      await filterBox.fill('')
      await filterResults(page, '')
    }
    await rowsDrawn(page)

    // A steady fast scroll with the wheel: the frames drawn with rows not read yet in the DOM
    await page.mouse.move(640, 500)
    await page.evaluate(() => {
      window.benchFrames = { all: 0, reading: 0, on: true }
      const count = () => {
        window.benchFrames.all++
        if (document.querySelector('#books tbody tr.placeholder') !== null) window.benchFrames.reading++
        if (window.benchFrames.on) window.requestAnimationFrame(count)
      }
      window.requestAnimationFrame(count)
    })
    const wheelStarted = performance.now()
    for (let i = 0; i < WHEEL_STEPS; i++) {
      await page.mouse.wheel(0, WHEEL_PX)
      await new Promise((resolve) => setTimeout(resolve, WHEEL_INTERVAL_MS))
    }
    const wheel = await page.evaluate(() => {
      window.benchFrames.on = false
      return { frames: window.benchFrames.all, reading: window.benchFrames.reading, scrollTop: document.getElementById('book-list').scrollTop }
    })
    wheel.seconds = (performance.now() - wheelStarted) / 1000
    await page.locator('#book-list').evaluate((scroller) => { scroller.scrollTop = 0 })
    await rowsDrawn(page)

    // Far: to the bottom of what is read, again and again, each time until the rows are drawn
    await page.evaluate(() => { window.benchLongTasks.length = 0 })
    const scrolls = []
    const farStarted = performance.now()
    for (let i = 0; i < FAR_SCROLLS; i++) {
      const started = performance.now()
      await page.locator('#book-list').evaluate((scroller) => { scroller.scrollTop = scroller.scrollHeight })
      await rowsDrawn(page)
      scrolls.push(performance.now() - started)
    }
    const farSeconds = (performance.now() - farStarted) / 1000
    const deepest = await deepestRow(page)
    const longestTask = await page.evaluate(() => Math.max(0, ...window.benchLongTasks.map((task) => task.duration)))
    const farMemory = await pageMemory(context, page, browserSession, before)
    const domRows = await page.locator('#books tbody tr.book').count()
    const topStarted = performance.now()
    await page.locator('#book-list').evaluate((scroller) => { scroller.scrollTop = 0 })
    await page.waitForFunction(() => document.querySelector('#books tbody tr.book[aria-rowindex="2"]') !== null, null, { polling: 'raf' })
    const backToTop = performance.now() - topStarted

    await page.getByRole('button', { name: 'Title', exact: true }).click()
    const sort = await nextMeasure(page, 'sort', 1)

    return {
      signIn, signInLongestTask, memory, filters, wheel, scrolls, farSeconds, deepest, longestTask, farMemory, domRows, backToTop, sort, token: pageToken
    }
  } finally {
    await context.close()
  }
}

/** The reference: the whole list fetched and parsed at once, held whole. */
async function naiveRound (browser, browserSession, service, size, pageToken, log) {
  const { context, page } = await openPage(browser, log, `naive ${group(size)}`)
  try {
    // Any page of the service's origin will do: the signed-out console, which does nothing
    await page.goto(`${service.url}/console/`)
    const before = await rendererTimes(browserSession)
    const load = await page.evaluate(async (token) => {
      const started = performance.now()
      const response = await fetch('/books', { headers: { Authorization: token } })
      const body = await response.json()
      window.benchBooks = body.data
      return { ms: performance.now() - started, status: response.status, count: Array.isArray(body.data) ? body.data.length : null }
    }, pageToken)
    if (load.status !== 200 || load.count < size) log.push(`naive ${group(size)}: GET /books answered ${load.status} with ${load.count} books`)
    return { load, memory: await pageMemory(context, page, browserSession, before) }
  } finally {
    await context.close()
  }
}

// --- report -----------------------------------------------------------------------------------

const ms = (value) => value === null || value === undefined || Number.isNaN(value) ? '-' : value >= 100 ? value.toFixed(0) : value.toFixed(1)
const mb = (bytes) => bytes === null || bytes === undefined ? '-' : (bytes / MB).toFixed(1)
const med = (values) => values.length === 0 ? null : median(values)
const max = (values) => values.length === 0 ? null : Math.max(...values)
const verdict = (ok) => ok ? 'met' : 'NOT MET'

/** The figures of one size, over its rounds: median (and the slowest where a target bounds it). */
function summarise (size, runs, naive) {
  const filterResults = (query) => runs.map((run) => run.filters.find((f) => f.query === query)?.results).filter((v) => v !== undefined)
  const allFilters = FILTERS.flatMap(filterResults)
  const scrolls = runs.flatMap((run) => run.scrolls)
  return {
    size,
    rounds: runs.length,
    firstRows: med(runs.map((r) => r.signIn.firstRows)),
    firstRowsMax: max(runs.map((r) => r.signIn.firstRows)),
    signedIn: med(runs.map((r) => r.signIn.signedIn)),
    firstPage: med(runs.map((r) => r.signIn.firstPage).filter((v) => v !== null)),
    filters: FILTERS.map((query) => ({ query, median: med(filterResults(query)), max: max(filterResults(query)), count: runs.at(-1)?.filters.find((f) => f.query === query)?.count })),
    filterMax: max(allFilters),
    signInLongestTask: max(runs.map((r) => r.signInLongestTask)),
    wheel: runs.map((r) => `${r.wheel.reading} / ${r.wheel.frames}`).join(', '),
    scrollMedian: med(scrolls),
    scrollMax: max(scrolls),
    farSeconds: med(runs.map((r) => r.farSeconds)),
    deepest: med(runs.map((r) => r.deepest)),
    longestTask: max(runs.map((r) => r.longestTask)),
    backToTop: med(runs.map((r) => r.backToTop)),
    sort: med(runs.map((r) => r.sort)),
    heap: med(runs.map((r) => r.memory.heap)),
    farHeap: med(runs.map((r) => r.farMemory.heap)),
    heapMax: max(runs.flatMap((r) => [r.memory.heap, r.farMemory.heap])),
    rss: runs.every((r) => r.farMemory.rss !== null) ? med(runs.map((r) => r.farMemory.rss)) : null,
    domRows: med(runs.map((r) => r.domRows)),
    nodes: med(runs.map((r) => r.farMemory.nodes)),
    naiveLoad: naive.length === 0 ? null : med(naive.map((n) => n.load.ms)),
    naiveHeap: naive.length === 0 ? null : med(naive.map((n) => n.memory.heap))
  }
}

function report (summaries) {
  const rows = [
    ['sign in to first rows drawn, ms (slowest)', (s) => `${ms(s.firstRows)} (${ms(s.firstRowsMax)})`,
      (s) => `${group(s.size)}: ${verdict(s.firstRowsMax !== null && s.firstRowsMax <= FIRST_ROWS_TARGET_MS)}`, `${FIRST_ROWS_TARGET_MS} ms`],
    ['of which the sign-in itself (POST /token), ms', (s) => ms(s.signedIn)],
    ['sign in to the first page of the list in pages, ms', (s) => ms(s.firstPage)],
    ...FILTERS.map((query, i) => [`filter "${query}": last key to first results, ms (slowest)`,
      (s) => `${ms(s.filters[i].median)} (${ms(s.filters[i].max)})`,
      i === 0 ? (s) => `${group(s.size)}: ${verdict(s.filterMax !== null && s.filterMax <= FILTER_TARGET_MS)}` : undefined,
      i === 0 ? `${FILTER_TARGET_MS} ms, every filter` : undefined]),
    ...FILTERS.map((query, i) => [`filter "${query}": the status line then`, (s) => s.filters[i].count ?? '-']),
    ['longest task of the page while the list streamed and switched to pages, ms', (s) => ms(s.signInLongestTask)],
    [`wheel: ${WHEEL_STEPS} x ${WHEEL_PX} px every ${WHEEL_INTERVAL_MS} ms, frames with rows being read / frames`, (s) => s.wheel],
    [`far scroll: ${FAR_SCROLLS} scrolls to the bottom, each to rows drawn, median ms (slowest)`, (s) => `${ms(s.scrollMedian)} (${ms(s.scrollMax)})`],
    ['far scroll: rows deep at the end', (s) => group(s.deepest)],
    ['far scroll: seconds in all', (s) => s.farSeconds.toFixed(1)],
    ['far scroll: longest task of the page, ms', (s) => ms(s.longestTask)],
    ['back to the top (pages read again), ms', (s) => ms(s.backToTop)],
    ['sort by Title, click to rows drawn, ms', (s) => ms(s.sort)],
    ['JS heap after GC, in pages, MB', (s) => mb(s.heap),
      (s) => `${group(s.size)}: ${verdict(s.heapMax !== null && s.heapMax <= HEAP_TARGET_BYTES)}`, `${HEAP_TARGET_BYTES / MB} MB`],
    ['JS heap after GC, after the far scroll, MB', (s) => mb(s.farHeap)],
    ['renderer RSS after the far scroll, MB', (s) => mb(s.rss)],
    ['book rows in the DOM (DOM nodes)', (s) => `${s.domRows} (${s.nodes})`],
    ['naive page: fetch + .json() of every book, ms', (s) => ms(s.naiveLoad)],
    ['naive page: JS heap after GC, MB', (s) => mb(s.naiveHeap)]
  ]
  const header = ['figure (median of rounds)', ...summaries.map((s) => `${group(s.size)} books`), 'target', 'verdict']
  const body = rows.map(([label, value, judge, target]) => [
    label, ...summaries.map((s) => String(value(s))), target ?? '', judge === undefined ? '' : summaries.map(judge).join('; ')
  ])
  return markdownTable(header, body)
}

// --- main -------------------------------------------------------------------------------------

async function main (bench) {
  const began = performance.now()
  const pgVersion = await admin(async (client) => (await client.query('SHOW server_version')).rows[0].server_version)
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS, timeout: 60_000 })
  bench.onCleanup(() => browser.close())
  const browserSession = await browser.newBrowserCDPSession()

  const cpus = os.cpus()
  const header = [
    `bookkeeping console benchmark, ${new Date().toISOString()}`,
    `machine: ${cpus.length} CPU (${cpus[0]?.model ?? 'unknown'}), ${(os.totalmem() / 2 ** 30).toFixed(1)} GiB; load average at start ` +
      `${os.loadavg().map((l) => l.toFixed(2)).join(' ')}; node ${process.version}; PostgreSQL ${pgVersion}; Chromium ${browser.version()} ` +
      `(headless, playwright-core ${require('playwright-core/package.json').version})`,
    `sizes ${SIZES.map(group).join(', ')}; ${ROUNDS} rounds per size in fresh browser contexts; filters typed ` +
      `${FILTERS.map((f) => JSON.stringify(f)).join(', ')}, ${KEY_DELAY_MS} ms between keys; ${FAR_SCROLLS} scrolls to the bottom`
  ]
  console.log(header.join('\n'))

  const log = []
  const summaries = []
  const raw = []
  const complaints = []
  for (const size of SIZES) {
    console.error(`\n${group(size)} books`)
    const database = await listDatabase(size, { create: size <= SEEDS_UP_TO })
    console.error(`database ${database.name}: ${database.seeded === null ? 'kept from an earlier run' : `seeded in ${database.seeded.toFixed(1)} s`}`)
    const service = await startService(bench, database.url)
    console.error(`service: \`npm start\` pid ${service.child.pid} on port ${service.port}, listening after ${service.startSeconds.toFixed(1)} s ` +
      `(${service.migrations} migration steps applied)`)
    // The first page of each filter once, so that the rounds all find the same pages cached
    const token = await issueToken(service.port)
    for (const query of ['', ...FILTERS.flatMap((text) => [`&title=${text}`, `&author=${text}`])]) {
      await request(service.port, 'GET', `/books?limit=100&sort=id${query}`, { token, timeoutMs: 60_000 })
    }
    const runs = []
    const naive = []
    for (let round = 1; round <= ROUNDS; round++) {
      const run = await consoleRound(browser, browserSession, service, size, log)
      runs.push(run)
      console.error(`  round ${round} (load average ${os.loadavg()[0].toFixed(2)}): signed in ${ms(run.signIn.signedIn)} ms, first rows ${ms(run.signIn.firstRows)} ms, ` +
        `first page ${ms(run.signIn.firstPage)} ms (longest task ${ms(run.signInLongestTask)} ms), heap ${mb(run.memory.heap)} MB; ` +
        `filters ${run.filters.map((f) => `${f.query} ${ms(f.results)} ms`).join(', ')}; ` +
        `wheel ${run.wheel.reading} of ${run.wheel.frames} frames reading (${run.wheel.seconds.toFixed(1)} s to ${group(run.wheel.scrollTop)} px); ` +
        `far scroll ${run.farSeconds.toFixed(1)} s to row ${group(run.deepest)} (slowest scroll ${ms(max(run.scrolls))} ms, longest task ` +
        `${ms(run.longestTask)} ms), heap then ${mb(run.farMemory.heap)} MB; back to the top ${ms(run.backToTop)} ms; sort ${ms(run.sort)} ms`)
      if (size <= NAIVE_UP_TO) {
        const n = await naiveRound(browser, browserSession, service, size, run.token, log)
        naive.push(n)
        console.error(`  naive: ${ms(n.load.ms)} ms, heap ${mb(n.memory.heap)} MB`)
      }
    }
    summaries.push(summarise(size, runs, naive))
    raw.push({ size, database: database.name, console: runs.map(({ token, ...rest }) => rest), naive })
    complaints.push(...service.complaints.map((line) => `${group(size)}: ${line}`))
    await stopChild(service.child, 10_000)
  }

  console.log(`\n${report(summaries)}\n`)
  console.log([
    'first rows: from the click on Sign in (its event time) to the end of the page\'s `first-rows` measure (the streamed list\'s',
    '  first rows drawn); first page: to the end of `first-page` (the list in pages drawn). Filters: the page\'s `filter-results`',
    '  measure, from the last key\'s input event to the first results drawn, its wait after the last key included.',
    'far scroll: `scrollTop = scrollHeight` on the list, then until no placeholder row is in sight (polled at each frame).',
    'memory: after two forced collections (HeapProfiler.collectGarbage), Performance.getMetrics JSHeapUsedSize; RSS is VmRSS',
    '  of the renderer that used the most CPU since sign-in (SystemInfo.getProcessInfo). MB = 10^6 bytes.'
  ].join('\n'))
  console.log(log.length === 0 ? '\nin the pages: no errors, warnings or failed requests' : `\nin the pages (${log.length}):\n${log.slice(0, 40).map((line) => `  ${line}`).join('\n')}`)
  if (complaints.length > 0) console.log(`\nthe service's warnings and errors (${complaints.length}):\n${complaints.slice(0, 40).map((line) => `  ${line}`).join('\n')}`)

  const resultsPath = path.join(bench.tmpDir, 'results.json')
  fs.writeFileSync(resultsPath, JSON.stringify({ header, summaries, raw, log, complaints }, null, 2))
  console.log(`\nraw results: ${resultsPath}`)
  console.log(`total time: ${((performance.now() - began) / 1000).toFixed(0)} s`)
}

runBenchmark('console', main)
