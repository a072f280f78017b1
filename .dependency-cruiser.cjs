/**
 * The import layers of the project, checked by `npm run check` (dependency-cruiser). A rule here
 * fails the check when an import breaks it; docs/development.md says why each layer exists.
 * @type {import('dependency-cruiser').IConfiguration}
 */
module.exports = {
  forbidden: [
    {
      name: 'no-cycles',
      comment: 'A cycle makes two modules one: neither can be read, tested or moved alone',
      severity: 'error',
      from: {},
      to: { circular: true }
    },
    {
      name: 'src-is-the-ground-floor',
      comment: 'src/ holds what plugins and routes build on; only the root plugin, src/app.ts, composes them',
      severity: 'error',
      from: { path: '^src/', pathNot: '^src/app\\.ts$' },
      to: { path: '^(plugins|routes)/' }
    },
    {
      name: 'external-plugins-stand-alone',
      comment: 'plugins/external wraps third-party plugins; what it shares with plugins/app lives in src/',
      severity: 'error',
      from: { path: '^plugins/external/' },
      to: { path: '^plugins/app/' }
    },
    {
      name: 'plugins-below-routes',
      comment: 'A plugin decorates the instance the routes use; it never reaches into a route',
      severity: 'error',
      from: { path: '^plugins/' },
      to: { path: '^routes/' }
    },
    {
      name: 'routes-stand-alone',
      comment: 'Each route file is an encapsulated plugin: what two routes share lives in src/ or a plugin',
      severity: 'error',
      from: { path: '^routes/' },
      to: { path: '^routes/' }
    },
    {
      name: 'routes-use-plugins-through-the-instance',
      comment: 'A route reaches a plugin through what it decorates on the instance; their shared types and helpers live in src/',
      severity: 'error',
      from: { path: '^routes/' },
      to: { path: '^plugins/' }
    },
    {
      name: 'beside-the-service',
      comment: 'The console and the tools use the service through its API and its process; of its ' +
        'modules only the configuration schema, the shared schemas and the project root',
      severity: 'error',
      from: { path: '^(console|tools|docs/examples)/' },
      to: {
        path: '^(src|plugins|routes)/',
        pathNot: '^src/(config|project-root)\\.ts$|^src/schemas/'
      }
    },
    {
      name: 'the-service-stands-alone',
      comment: 'npm start runs src/, plugins/ and routes/ alone: they import nothing from beside them',
      severity: 'error',
      from: { path: '^(src|plugins|routes)/' },
      to: { path: '^(console|tools|test|docs)/' }
    }
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    exclude: { path: '(^|/)(dist|\\.test-build|node_modules)/' },
    tsConfig: { fileName: 'tsconfig.json' },
    tsPreCompilationDeps: true,
    enhancedResolveOptions: { extensions: ['.ts', '.mts', '.js', '.cjs', '.mjs', '.d.ts'] }
  }
}
