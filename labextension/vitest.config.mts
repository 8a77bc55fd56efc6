import { defineConfig } from 'vitest/config';

// Unit tests of the pure modules, in Node: no browser, no JupyterLab.
export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    environment: 'node'
  }
});
