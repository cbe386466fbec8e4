// agentbox code-interpreter driver for JavaScript (node >= 12).
//
// The agent starts `node -e <bootstrap>`; the bootstrap reads this file
// from fd 3 and evaluates it. Same NDJSON protocol as driver.py: commands
// on fd 3, events on fd 4, the user's output on fds 1 and 2 (the agent
// appends its end-of-execution marker to them after "done").
//
// Cells run as scripts in the driver's own realm (vm.runInThisContext), so
// globals, var/let/const and functions persist like in node's REPL. The
// completion value is the main result (util.inspect as text); a returned
// promise is awaited. SIGINT breaks a running script (breakOnSigint) or an
// awaited promise.
(function () {
  'use strict';
  const fs = require('fs');
  const net = require('net');
  const util = require('util');
  const vm = require('vm');

  const EVT = 4;
  const DRIVER_FILE = '<agentbox-driver>';
  let count = 0;
  let maxResult = 16 << 20;
  let interruptAwait = null;

  function send(obj) {
    const b = Buffer.from(JSON.stringify(obj) + '\n');
    let off = 0;
    try {
      while (off < b.length) off += fs.writeSync(EVT, b, off, b.length - off);
    } catch (e) {
      process.exit(1); // the agent is gone
    }
  }

  function writeAll(fd, s) {
    const b = Buffer.from(s);
    let off = 0;
    while (off < b.length) off += fs.writeSync(fd, b, off, b.length - off);
  }

  function bundle(value) {
    let text;
    try {
      text = util.inspect(value, { depth: 4, maxArrayLength: 100, breakLength: 80 });
    } catch (e) {
      text = String(value);
    }
    if (text.length > maxResult) text = text.slice(0, maxResult) + '...';
    return { 'text/plain': text };
  }

  // display(value) shows a value as a non-main result, like IPython's.
  Object.defineProperty(globalThis, 'display', {
    value: function display(...values) {
      for (const v of values) send({ ev: 'result', main: false, data: bundle(v) });
    },
    writable: true, configurable: true, enumerable: false,
  });

  // Errors escaping user callbacks must not kill the context (node's
  // default): they are reported on stderr like the REPL does.
  process.on('uncaughtException', (e) => {
    try { writeAll(2, `Uncaught ${util.inspect(e)}\n`); } catch (_) { /* stderr gone */ }
  });
  process.on('unhandledRejection', (e) => {
    try { writeAll(2, `Unhandled promise rejection: ${util.inspect(e)}\n`); } catch (_) { /* stderr gone */ }
  });

  // Without a listener SIGINT would kill node between scripts.
  process.on('SIGINT', () => {
    if (interruptAwait) interruptAwait();
  });

  function awaitInterruptible(promise) {
    return new Promise((resolve, reject) => {
      interruptAwait = () => {
        const e = new Error('Script execution was interrupted by `SIGINT`');
        e.code = 'ERR_SCRIPT_EXECUTION_INTERRUPTED';
        reject(e);
      };
      promise.then(resolve, reject);
    }).finally(() => { interruptAwait = null; });
  }

  function errorInfo(e) {
    if (e instanceof Error || (e && typeof e === 'object' && 'stack' in e)) {
      const stack = String(e.stack || '')
        .split('\n')
        .filter((l) => !l.includes(DRIVER_FILE) && !l.includes('(node:') && !l.includes('at node:'))
        .join('\n');
      return { name: String(e.name || 'Error'), value: String(e.message || ''), traceback: stack };
    }
    return { name: 'Error', value: String(e), traceback: '' };
  }

  function applyEnv(setenv, env) {
    for (const [k, v] of Object.entries(setenv || {})) {
      if (v === null) delete process.env[k]; else process.env[k] = v;
    }
    const saved = {};
    for (const [k, v] of Object.entries(env || {})) {
      saved[k] = Object.prototype.hasOwnProperty.call(process.env, k) ? process.env[k] : null;
      process.env[k] = String(v);
    }
    return saved;
  }

  function restoreEnv(saved) {
    for (const [k, v] of Object.entries(saved)) {
      if (v === null) delete process.env[k]; else process.env[k] = v;
    }
  }

  async function execute(msg) {
    const seq = msg.seq || 0;
    if (msg.max_result) maxResult = msg.max_result;
    const saved = applyEnv(msg.setenv, msg.env);
    count++;
    send({ ev: 'start', seq, count });
    let error = null;
    try {
      const script = new vm.Script(msg.code || '', { filename: `<cell-${count}>` });
      let value = script.runInThisContext({ breakOnSigint: true, displayErrors: false });
      if (value && typeof value.then === 'function') value = await awaitInterruptible(value);
      if (value !== undefined) send({ ev: 'result', main: true, data: bundle(value) });
    } catch (e) {
      error = errorInfo(e);
    }
    restoreEnv(saved);
    if (error) send(Object.assign({ ev: 'error' }, error));
    send({ ev: 'done', seq, count });
  }

  // Commands arrive as lines on fd 3 and run one after another; the event
  // loop stays free between cells, so timers and promises keep running.
  const ctrl = new net.Socket({ fd: 3, readable: true, writable: false });
  let buf = '';
  let chain = Promise.resolve();
  ctrl.setEncoding('utf8');
  ctrl.on('data', (chunk) => {
    buf += chunk;
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      let msg;
      try { msg = JSON.parse(line); } catch (e) { continue; }
      if (msg.op === 'exec') chain = chain.then(() => execute(msg));
    }
  });
  ctrl.on('end', () => process.exit(0));
  ctrl.on('error', () => process.exit(0));

  send({ ev: 'ready', engine: 'node', version: process.version });
})();
