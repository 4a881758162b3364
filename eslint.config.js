// Lint is part of `npm test`: recommended JS + TypeScript rules, no type-aware rules (tsc does that part).
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/', 'node_modules/', 'test/artifacts/', 'var/'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: {
      globals: {
        process: 'readonly',
        console: 'readonly',
        Buffer: 'readonly',
        setTimeout: 'readonly',
        clearTimeout: 'readonly',
        setInterval: 'readonly',
        clearInterval: 'readonly',
        URL: 'readonly',
        setImmediate: 'readonly',
        clearImmediate: 'readonly',
        fetch: 'readonly',
        AbortController: 'readonly',
        TextEncoder: 'readonly',
        TextDecoder: 'readonly',
        performance: 'readonly',
        structuredClone: 'readonly',
        document: 'readonly',
        window: 'readonly',
        EventSource: 'readonly',
      },
    },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/no-explicit-any': 'error',
      'no-constant-condition': ['error', { checkLoops: false }],
      // Prettier wraps code at 120 (npm run format); comments are wrapped by hand, strings are left whole (grep-able).
      'max-len': [
        'error',
        { code: 120, ignoreStrings: true, ignoreTemplateLiterals: true, ignoreRegExpLiterals: true, ignoreUrls: true },
      ],
    },
  },
  {
    // The web page's script runs in the browser (tsconfig.page.json checks its types).
    files: ['src/admin/page/**/*.js'],
    languageOptions: {
      sourceType: 'script',
      globals: {
        location: 'readonly',
        history: 'readonly',
        URLSearchParams: 'readonly',
        HTMLSelectElement: 'readonly',
      },
    },
  },
);
