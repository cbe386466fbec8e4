import { defineConfig } from 'vite';

// The build lands where internal/console embeds it; assets under
// /console-assets/ (the daemon serves that prefix and / only).
export default defineConfig({
  base: '/',
  build: {
    outDir: '../../internal/console/static/dist',
    emptyOutDir: true,
    assetsDir: 'console-assets',
    sourcemap: false,
    modulePreload: { polyfill: false },
  },
  test: {
    include: ['src/**/*.test.ts'],
    environment: 'node',
  },
});
