import { describe, expect, it } from 'vitest';
import { builtinState } from './views/templates';

describe('builtinState', () => {
  it('says how long a build has run, of about how long, and its step', () => {
    expect(builtinState({ name: 'code-interpreter', state: 'building', elapsed_ms: 4100, estimate_ms: 30000, progress: 'step 2/4: RUN python3' }))
      .toBe('code-interpreter: building for 4s of about 30s (step 2/4: RUN python3)');
  });
  it('gives a failure its reason and the command that builds it', () => {
    expect(builtinState({ name: 'desktop', state: 'failed', error: 'apt-get failed', command: 'make templates' }))
      .toBe('desktop: failed: apt-get failed; build it with: make templates');
    expect(builtinState({ name: 'browser', state: 'not_built', command: 'make templates' }))
      .toBe('browser: not built; build it with: make templates');
  });
});
