// Drives sandboxapi's E2B-compatible API with @e2b/code-interpreter,
// unchanged (TestE2BCodeInterpreter): cells on the sandbox's kernel over
// port 49999. Environment: E2B_CI_SDK (the folder holding
// @e2b/code-interpreter and its e2b), E2B_API_URL, E2B_SANDBOX_URL,
// E2B_API_KEY, RUN (a tag unique to this run). Prints one line per step
// and "E2B CODE INTERPRETER OK" at the end; any failure exits non-zero.
'use strict'
const path = require('path')
const { Sandbox } = require(path.join(process.env.E2B_CI_SDK, '@e2b/code-interpreter'))
const { SandboxError, NotFoundError } = require(path.join(process.env.E2B_CI_SDK, 'e2b'))

const RUN = process.env.RUN
// The first cell starts the kernel and the plot imports matplotlib, in
// gVisor on a shared host: generous, as the SDK's own default (60 s).
const SLOW = { timeoutMs: 180_000, requestTimeoutMs: 180_000 }

function check(cond, msg) {
  if (!cond) throw new Error('check failed: ' + msg)
}

async function rejects(p, cls, what) {
  try {
    await p
  } catch (err) {
    check(err instanceof cls, `${what}: got ${err && err.constructor && err.constructor.name}: ${err && err.message}, want ${cls.name}`)
    return err
  }
  throw new Error(`${what}: resolved, want ${cls.name}`)
}

function step(name) {
  console.log('step: ' + name)
}

async function main() {
  // The SDK's default template: code-interpreter-v1.
  const sbx = await Sandbox.create({ metadata: { run: RUN }, timeoutMs: 600_000 })
  check((await sbx.getInfo()).templateId === 'code-interpreter-v1', 'default template')
  step('create ' + sbx.sandboxId)

  let e = await sbx.runCode('x = 1', SLOW)
  check(!e.error && e.results.length === 0, 'x = 1: ' + JSON.stringify(e))
  e = await sbx.runCode('x + 1')
  check(e.text === '2' && e.results.length === 1 && e.results[0].isMainResult, 'x + 1 gives 2: ' + JSON.stringify(e))
  step('variables persist across cells')

  const lines = []
  e = await sbx.runCode("print('hello from the kernel')\nimport sys\nprint('to stderr', file=sys.stderr)", {
    onStdout: (m) => lines.push(m.line),
  })
  check(lines.join('') === 'hello from the kernel\n', 'onStdout got the printed text: ' + JSON.stringify(lines))
  check(e.logs.stdout.join('') === 'hello from the kernel\n' && e.logs.stderr.join('') === 'to stderr\n', 'logs: ' + JSON.stringify(e.logs))
  step('onStdout')

  const seen = []
  e = await sbx.runCode("import matplotlib.pyplot as plt\nplt.plot([0, 1, 2], [2, 0, 1])\nplt.show()", Object.assign({ onResult: (r) => seen.push(r) }, SLOW))
  const plot = e.results.find((r) => r.png)
  check(plot && seen.some((r) => r.png), 'a plot result with png: ' + JSON.stringify(e.results.map((r) => r.formats())))
  const png = Buffer.from(plot.png, 'base64')
  check(png.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])) && png.length > 1000, 'the png decodes to a PNG: ' + png.subarray(0, 8).toString('hex'))
  e = await sbx.runCode("from IPython.display import HTML, Markdown\ndisplay(HTML('<b>bold</b>'))\nMarkdown('# title')")
  check(e.results.length === 2 && e.results[0].html === '<b>bold</b>' && !e.results[0].isMainResult, 'html display: ' + JSON.stringify(e.results))
  check(e.results[1].markdown === '# title' && e.results[1].isMainResult, 'markdown main result: ' + JSON.stringify(e.results))
  step('rich results (png, html, markdown)')

  e = await sbx.runCode('1/0')
  check(e.error && e.error.name === 'ZeroDivisionError' && e.error.value === 'division by zero', 'the error names its exception: ' + JSON.stringify(e.error))
  check(typeof e.error.traceback === 'string' && e.error.traceback.includes('ZeroDivisionError'), 'traceback: ' + JSON.stringify(e.error))
  step('1/0 is a ZeroDivisionError')

  const ctxs = await sbx.listCodeContexts()
  check(ctxs.length === 1 && ctxs[0].language === 'python', 'one context: ' + JSON.stringify(ctxs))
  const ctx = await sbx.createCodeContext({ language: 'python' })
  check(ctx.id === ctxs[0].id, 'a python context is the kernel: ' + JSON.stringify(ctx))
  e = await sbx.runCode('x', { context: ctx })
  check(e.text === '1', 'a cell in that context sees x: ' + JSON.stringify(e))
  await rejects(sbx.createCodeContext({ language: 'r' }), SandboxError, 'a context for a language without a kernel')
  await rejects(sbx.runCode('1', { language: 'javascript' }), SandboxError, 'a cell in a language without a kernel')
  await rejects(sbx.runCode('1', { context: { id: 'nope', language: 'python', cwd: '/home/user' } }), NotFoundError, 'an unknown context')
  step('contexts')

  check((await sbx.betaPause()) === true, 'pause')
  check((await sbx.getInfo()).state === 'paused', 'paused state')
  const again = await Sandbox.connect(sbx.sandboxId)
  e = await again.runCode('x', SLOW)
  check(e.text === '1' && !e.error && e.logs.stderr.length === 0, 'x survives pause and connect: ' + JSON.stringify(e))
  step('pause then connect keeps the kernel')

  // A kernel that dies: the cell says so (a fresh kernel is up for the
  // next one), and the variables are gone.
  e = await again.runCode('import os\nos._exit(1)', SLOW)
  check(e.logs.stderr.join('').includes('kernel was restarted'), 'the lost kernel is reported: ' + JSON.stringify(e))
  check(e.error && e.error.name === 'KernelDied', 'the dying cell is an error: ' + JSON.stringify(e))
  e = await again.runCode('x')
  check(e.error && e.error.name === 'NameError', 'x is gone with the dead kernel: ' + JSON.stringify(e.error))
  check(e.logs.stderr.length === 0, 'the restart is reported once: ' + JSON.stringify(e.logs))
  e = await again.runCode('y = 5\ny')
  check(e.text === '5' && !e.error, 'the fresh kernel runs cells: ' + JSON.stringify(e))
  step('a dead kernel is reported')

  await again.restartCodeContext(ctx)
  e = await again.runCode('y')
  check(e.error && e.error.name === 'NameError' && e.logs.stderr.length === 0, 'restartCodeContext restarts the kernel: ' + JSON.stringify(e))
  step('restartCodeContext')

  check((await again.kill()) === true, 'kill')
  await rejects(again.runCode('1'), SandboxError, 'a cell of a killed sandbox')
  step('kill')
  console.log('E2B CODE INTERPRETER OK')
}

// Exit once main is done: @e2b/code-interpreter's runCode leaves its
// request timer (requestTimeoutMs, 60 s) armed when the server answers an
// error, which would keep node, and the test waiting on it, idle that long.
main().then(() => process.exit(0), (err) => {
  console.error(err && err.stack ? err.stack : err)
  process.exit(1)
})
