// Times E2B's SDK against sandboxapi's own API from the same client
// runtime, alternating one sample of each (BenchmarkE2B). Environment:
// E2B_SDK, E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY, API_URL (the
// server's root), SESSION (a bash session of the same key), ROUNDS,
// CREATE_ROUNDS. Prints one JSON line: milliseconds per sample.
'use strict'
const path = require('path')
const { Sandbox } = require(path.join(process.env.E2B_SDK, 'e2b'))

const key = process.env.E2B_API_KEY
const api = process.env.API_URL
const rounds = Number(process.env.ROUNDS)
const createRounds = Number(process.env.CREATE_ROUNDS)

async function v1(method, p, body) {
  const res = await fetch(api + p, {
    method,
    headers: { 'X-API-Key': key, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  const text = await res.text()
  if (res.status >= 300) throw new Error(`${method} ${p}: ${res.status} ${text}`)
  return text ? JSON.parse(text) : null
}

async function timed(f) {
  const t0 = process.hrtime.bigint()
  await f()
  return Number(process.hrtime.bigint() - t0) / 1e6
}

async function main() {
  const out = { sdkRun: [], apiExec: [], apiLogin: [], sdkCreate: [], apiCreate: [] }
  const sbx = await Sandbox.create('base', { timeoutMs: 600_000 })
  const sdkRun = async () => {
    const r = await sbx.commands.run('true')
    if (r.exitCode !== 0) throw new Error('commands.run true: ' + JSON.stringify(r))
  }
  const apiExec = async () => {
    const r = await v1('POST', `/v1/sessions/${process.env.SESSION}/execute`, { code: 'true' })
    if (r.exit_code !== 0 || r.status !== 'ok') throw new Error('execute true: ' + JSON.stringify(r))
  }
  // The process E2B's command is: bash as a login shell (from a bash
  // script, so two bash starts).
  const apiLogin = async () => {
    const r = await v1('POST', `/v1/sessions/${process.env.SESSION}/execute`, { code: 'exec /bin/bash -l -c true' })
    if (r.exit_code !== 0 || r.status !== 'ok') throw new Error('execute bash -l -c true: ' + JSON.stringify(r))
  }
  for (let i = 0; i < 3; i++) { await sdkRun(); await apiExec(); await apiLogin() } // warm-up
  const sides = [[sdkRun, out.sdkRun], [apiExec, out.apiExec], [apiLogin, out.apiLogin]]
  for (let i = 0; i < rounds; i++) {
    for (let j = 0; j < sides.length; j++) {
      const [f, into] = sides[(i + j) % sides.length] // rotate who goes first
      into.push(await timed(f))
    }
  }
  await sbx.kill()
  // Creates: each sandbox or session is ended before the next is timed.
  for (let i = 0; i < createRounds; i++) {
    let made
    out.sdkCreate.push(await timed(async () => { made = await Sandbox.create('base') }))
    await made.kill()
    let id
    out.apiCreate.push(await timed(async () => { id = (await v1('POST', '/v1/sessions', { language: 'python3' })).id }))
    await v1('DELETE', '/v1/sessions/' + id)
  }
  console.log(JSON.stringify(out))
}

// Exit once main is done: a timer the SDK leaves armed (as
// @e2b/code-interpreter's runCode does with its 60 s request timer when
// the server answers an error) must not keep node, and the test waiting
// on it, idle.
main().then(() => process.exit(0), (err) => {
  console.error('FAILED: ' + (err && err.stack ? err.stack : err))
  process.exit(1)
})
