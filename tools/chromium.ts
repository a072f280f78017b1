/**
 * Debian's Chromium driven by playwright-core, as the browser tests (test/helpers/browser.ts) and
 * `npm run docs:screenshots` (./docs-screenshots.ts) launch it. Never a browser of Playwright's
 * own, which cannot be downloaded here.
 */
import { chromium, type Browser } from 'playwright-core'
import { findProgram } from './system-programs.js'

/**
 * Chromium as root, headless, on a closed network: without the sandbox (it refuses to start as
 * root with it), and without the background services (updates, sync, QUIC probes) that
 * otherwise flood the log with refused connections. Playwright's `launch` gives each browser a
 * fresh profile of its own in a temporary directory, removed when it closes.
 */
const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync'
]

/** Chromium with those flags; an error naming the install command when it is missing. */
export function launchChromium (): Promise<Browser> {
  return chromium.launch({ executablePath: findProgram('chromium'), args: CHROMIUM_ARGS, timeout: 30_000 })
}
