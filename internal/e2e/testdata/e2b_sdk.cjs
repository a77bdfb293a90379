// Drives sandboxapi's E2B-compatible API with E2B's own JavaScript SDK,
// unchanged (TestE2BSDK). Environment: E2B_SDK (the folder holding the
// e2b package), E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY, OTHER_KEY (a
// key of another account), RUN (a tag unique to this run). Prints one
// line per step and "E2B SDK OK" at the end; any failure exits non-zero.
'use strict'
const path = require('path')
const e2b = require(path.join(process.env.E2B_SDK, 'e2b'))
const { Sandbox, AuthenticationError, NotFoundError, FileNotFoundError, InvalidArgumentError, RateLimitError, SandboxError } = e2b

const RUN = process.env.RUN
const OTHER = process.env.OTHER_KEY

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
  const sbx = await Sandbox.create('base', { metadata: { suite: 'e2e', run: RUN }, envs: { GREETING: 'hi' }, timeoutMs: 300_000 })
  check(typeof sbx.sandboxId === 'string' && sbx.sandboxId.length > 0, 'sandbox id')
  step('create ' + sbx.sandboxId)

  const info = await sbx.files.write('/home/user/hello.txt', 'hello e2b')
  check(info.path === '/home/user/hello.txt' && info.name === 'hello.txt', 'write answers the path: ' + JSON.stringify(info))
  check((await sbx.files.read('/home/user/hello.txt')) === 'hello e2b', 'read back')
  check((await sbx.files.read('hello.txt')) === 'hello e2b', 'a relative path is under the home')
  step('write and read')

  const many = await sbx.files.write([
    { path: 'multi/a.txt', data: 'A' },
    { path: '/home/user/multi/deeper/b.bin', data: new Uint8Array([0, 1, 2, 255]) },
  ])
  check(Array.isArray(many) && many.length === 2, 'several files in one write: ' + JSON.stringify(many))
  check(many[0].path === '/home/user/multi/a.txt' && many[1].path === '/home/user/multi/deeper/b.bin', 'their paths: ' + JSON.stringify(many))
  const bytes = await sbx.files.read('/home/user/multi/deeper/b.bin', { format: 'bytes' })
  check(bytes.length === 4 && bytes[0] === 0 && bytes[3] === 255, 'binary content: ' + Array.from(bytes))
  step('several files in one write')

  await sbx.files.write('/home/user/zipped.txt', 'gzip on the wire '.repeat(100), { gzip: true })
  check((await sbx.files.read('/home/user/zipped.txt')) === 'gzip on the wire '.repeat(100), 'gzip upload')
  step('gzip upload')

  check((await sbx.files.exists('/home/user/hello.txt')) === true, 'exists')
  check((await sbx.files.exists('/home/user/nope.txt')) === false, 'exists of a missing file')
  const st = await sbx.files.getInfo('/home/user/hello.txt')
  check(st.type === 'file' && st.size === 9 && st.path === '/home/user/hello.txt', 'getInfo: ' + JSON.stringify(st))
  step('exists and getInfo')

  const top = await sbx.files.list('/home/user')
  const names = top.map((e) => e.name)
  check(names.includes('hello.txt') && names.includes('multi'), 'list: ' + names)
  check(top.find((e) => e.name === 'multi').type === 'dir', 'list types')
  check(!names.includes('a.txt'), 'depth 1 stays at the top')
  const deep = await sbx.files.list('/home/user', { depth: 3 })
  const paths = deep.map((e) => e.path)
  check(paths.includes('/home/user/multi/a.txt') && paths.includes('/home/user/multi/deeper/b.bin'), 'list with depth: ' + paths)
  step('list with depth')

  check((await sbx.files.makeDir('/home/user/newdir/sub')) === true, 'makeDir')
  check((await sbx.files.makeDir('/home/user/newdir/sub')) === false, 'makeDir of an existing folder')
  const moved = await sbx.files.rename('/home/user/hello.txt', '/home/user/newdir/hello2.txt')
  check(moved.path === '/home/user/newdir/hello2.txt', 'rename answers the new path: ' + JSON.stringify(moved))
  check((await sbx.files.exists('/home/user/hello.txt')) === false, 'renamed away')
  check((await sbx.files.read('/home/user/newdir/hello2.txt')) === 'hello e2b', 'renamed content')
  await sbx.files.remove('/home/user/multi')
  check((await sbx.files.exists('/home/user/multi/a.txt')) === false, 'removed folder')
  step('makeDir, rename, remove')

  // watchDir: a stream from the guest's inotify watch; files written
  // through the SDK (commands are not served yet) show up as events,
  // in subfolders too when recursive.
  const events = []
  const handle = await sbx.files.watchDir('/home/user/newdir', (ev) => events.push(ev), { recursive: true })
  await sbx.files.write('/home/user/newdir/watched.txt', 'seen')
  await sbx.files.write('/home/user/newdir/sub/deep.txt', 'deep')
  const saw = (name) => events.some((e) => e.name === name && (e.type === 'create' || e.type === 'write'))
  for (let i = 0; i < 200 && !(saw('watched.txt') && saw('sub/deep.txt')); i++) await new Promise((r) => setTimeout(r, 50))
  await handle.stop()
  check(saw('watched.txt'), 'watchDir saw the write: ' + JSON.stringify(events))
  check(saw('sub/deep.txt'), 'a recursive watchDir saw the write below: ' + JSON.stringify(events))
  check(!events.some((e) => e.name.includes('.sbx-upload')), 'no staging files in events: ' + JSON.stringify(events))
  await rejects(sbx.files.watchDir('/etc', () => {}), InvalidArgumentError, 'watchDir outside the home')
  step('watchDir')

  await rejects(sbx.files.read('/home/user/missing.txt'), FileNotFoundError, 'read of a missing file')
  await rejects(sbx.files.list('/etc'), InvalidArgumentError, 'a path outside the home')
  await rejects(sbx.files.remove('/home/user/../../etc/passwd'), InvalidArgumentError, 'a path that climbs out')
  step('errors')

  await require('./e2b_sdk_commands.cjs')(sbx, e2b, { check, rejects, step })

  await sbx.setTimeout(600_000)
  const got = await sbx.getInfo()
  check(got.metadata.run === RUN && got.metadata.suite === 'e2e', 'metadata: ' + JSON.stringify(got.metadata))
  check(got.state === 'running' && got.templateId === 'base', 'info: ' + JSON.stringify(got))
  check(got.endAt.getTime() > Date.now() + 500_000, 'setTimeout moved the end: ' + got.endAt.toISOString())
  step('setTimeout and getInfo')

  const page = await Sandbox.list({ query: { metadata: { run: RUN } } }).nextItems()
  check(page.length === 1 && page[0].sandboxId === sbx.sandboxId && page[0].state === 'running', 'list by metadata: ' + JSON.stringify(page))
  const none = await Sandbox.list({ query: { metadata: { run: RUN + '-other' } } }).nextItems()
  check(none.length === 0, 'list by other metadata: ' + JSON.stringify(none))
  step('Sandbox.list')

  check((await sbx.betaPause()) === true, 'betaPause')
  check((await sbx.pause()) === false, 'pause of a paused sandbox answers false')
  check((await sbx.getInfo()).state === 'paused', 'paused state')
  const paused = await Sandbox.list({ query: { metadata: { run: RUN }, state: ['paused'] } }).nextItems()
  check(paused.length === 1 && paused[0].state === 'paused', 'list of paused: ' + JSON.stringify(paused))
  const again = await Sandbox.connect(sbx.sandboxId)
  check((await again.files.read('/home/user/newdir/hello2.txt')) === 'hello e2b', 'files kept across pause and connect')
  check((await again.getInfo()).state === 'running', 'running after connect')
  step('pause then connect keeps files')

  const badKey = { apiKey: 'sk_wrong_key_for_e2e' }
  await rejects(Sandbox.list(badKey).nextItems(), AuthenticationError, 'list with a wrong key')
  await rejects(Sandbox.create('base', badKey), AuthenticationError, 'create with a wrong key')
  step('a wrong key')

  const other = { apiKey: OTHER }
  await rejects(Sandbox.connect(sbx.sandboxId, other), NotFoundError, "connect to another key's sandbox")
  await rejects(Sandbox.getInfo(sbx.sandboxId, other), NotFoundError, "info of another key's sandbox")
  check((await Sandbox.kill(sbx.sandboxId, other)) === false, "kill of another key's sandbox answers false")
  check((await Sandbox.list(other).nextItems()).length === 0, "another key lists none of this key's sandboxes")
  check((await again.files.exists('/home/user/newdir/hello2.txt')) === true, "the sandbox survives the other key's calls")
  step("another key's sandbox")

  check((await sbx.kill()) === true, 'kill')
  await rejects(Sandbox.getInfo(sbx.sandboxId), NotFoundError, 'info after kill')
  check((await Sandbox.kill(sbx.sandboxId)) === false, 'a second kill answers false')
  await rejects(again.files.read('/home/user/newdir/hello2.txt'), SandboxError, 'a file of a killed sandbox')
  step('kill')

  // The key's plan (PRO) holds two sandboxes at once: a third is the
  // SDK's RateLimitError (quota_exceeded, 429). A short request timeout
  // keeps the SDK from waiting out the Retry-After.
  const first = await Sandbox.create('base', { metadata: { run: RUN + '-quota' } })
  const second = await Sandbox.create('base', { metadata: { run: RUN + '-quota' } })
  await rejects(Sandbox.create('base', { requestTimeoutMs: 2000 }), RateLimitError, 'a sandbox over the plan')
  // Pages as the SDK walks them (limit, x-next-token, nextToken).
  const pager = Sandbox.list({ query: { metadata: { run: RUN + '-quota' } }, limit: 1 })
  const p1 = await pager.nextItems()
  check(p1.length === 1 && pager.hasNext, 'first page of one: ' + JSON.stringify(p1))
  const p2 = await pager.nextItems()
  check(p2.length === 1 && p2[0].sandboxId !== p1[0].sandboxId && !pager.hasNext, 'second and last page: ' + JSON.stringify(p2))
  check((await first.kill()) && (await second.kill()), 'kill the quota sandboxes')
  step('quota exceeded is a RateLimitError; pages')

  console.log('E2B SDK OK')
}

// Exit once main is done: a timer the SDK leaves armed (as
// @e2b/code-interpreter's runCode does with its 60 s request timer when
// the server answers an error) must not keep node, and the test waiting
// on it, idle.
main().then(() => process.exit(0), (err) => {
  console.error('FAILED: ' + (err && err.stack ? err.stack : err))
  process.exit(1)
})
