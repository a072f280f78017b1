import { fileURLToPath } from 'node:url'
import { defineConfig } from 'vite'

/**
 * `npm run build` makes the console with this: the page and its hashed bundles in dist/console,
 * which the service serves at /console/ (plugins/app/console.ts). Nothing is inlined into the
 * page (its Content-Security-Policy allows no inline script or style) and nothing is loaded from
 * elsewhere.
 */
export default defineConfig({
  root: fileURLToPath(new URL('.', import.meta.url)),
  base: '/console/',
  logLevel: 'warn',
  build: {
    outDir: fileURLToPath(new URL('../dist/console', import.meta.url)),
    emptyOutDir: true,
    // data: URLs are not allowed by the page's policy
    assetsInlineLimit: 0,
    // The browsers of the last few years; the page uses dialog, TextDecoderStream, private fields
    target: 'es2022',
    modulePreload: { polyfill: false },
    reportCompressedSize: false
  }
})
