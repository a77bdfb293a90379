// The commands and PTY part of e2b_sdk.cjs: E2B's SDK, unchanged, on the
// session's background processes (envd's process service). Called with a
// running sandbox made with envs { GREETING: 'hi' }.
'use strict'

async function until(cond, ms, what) {
  const end = Date.now() + ms
  while (!cond()) {
    if (Date.now() > end) throw new Error('timed out waiting for ' + what)
    await new Promise((r) => setTimeout(r, 50))
  }
}

module.exports = async function commands(sbx, e2b, { check, rejects, step }) {
  const { CommandExitError, NotFoundError, RateLimitError, SandboxError } = e2b

  const hi = await sbx.commands.run('echo hi')
  check(hi.exitCode === 0 && hi.stdout === 'hi\n' && hi.stderr === '', 'echo hi: ' + JSON.stringify(hi))
  step('commands.run foreground')

  // A login shell (E2B runs every command as bash -l) still finds every
  // language's default runtime: Debian's /etc/profile sets PATH anew.
  const tools = await sbx.commands.run('node --version && go version && python3 --version && java -version 2>&1 | head -1')
  check(/^v\d+\./.test(tools.stdout) && /go version go1\./.test(tools.stdout) && /Python 3\./.test(tools.stdout), 'runtimes on a login shell\'s PATH: ' + JSON.stringify(tools))
  step('runtimes on PATH')

  const bad = await rejects(sbx.commands.run('echo out; echo oops >&2; exit 3'), CommandExitError, 'a non-zero exit')
  check(bad.exitCode === 3 && bad.stdout === 'out\n' && bad.stderr === 'oops\n', 'the exit error: ' + JSON.stringify(bad.result))
  check(/exit status 3/.test(bad.error), 'the exit error names the status: ' + bad.error)
  step('a non-zero exit is CommandExitError')

  check((await sbx.files.makeDir('/home/user/wd')) === true, 'makeDir for cwd')
  const env = await sbx.commands.run('echo "$GREETING $WHO $(pwd) $HOME"', { envs: { WHO: 'e2b' }, cwd: '/home/user/wd' })
  check(env.stdout === 'hi e2b /home/sandbox/wd /home/sandbox\n', 'sandbox envs, command envs and cwd: ' + JSON.stringify(env.stdout))
  const rel = await sbx.commands.run('pwd', { cwd: 'wd' })
  check(rel.stdout === '/home/sandbox/wd\n', 'a relative cwd is under the home: ' + JSON.stringify(rel.stdout))
  await rejects(sbx.commands.run('true', { user: 'root' }), SandboxError, 'a command as root')
  step('envs and cwd')

  // Callbacks get the chunks as they come, in order: the sleeps keep
  // the lines apart, so more than one chunk arrives before the end.
  const seen = []
  const timed = []
  const t0 = Date.now()
  const streamed = await sbx.commands.run('for i in 1 2 3 4; do echo line$i; echo err$i >&2; sleep 0.4; done', {
    onStdout: (d) => { seen.push('o:' + d); timed.push(Date.now() - t0) },
    onStderr: (d) => seen.push('e:' + d),
  })
  const outs = seen.filter((s) => s.startsWith('o:')).map((s) => s.slice(2)).join('')
  const errs = seen.filter((s) => s.startsWith('e:')).map((s) => s.slice(2)).join('')
  check(outs === 'line1\nline2\nline3\nline4\n' && errs === 'err1\nerr2\nerr3\nerr4\n', 'callbacks in order: ' + JSON.stringify(seen))
  check(streamed.stdout === outs && streamed.stderr === errs, 'the result holds what the callbacks saw')
  check(timed.length >= 2 && timed[timed.length - 1] - timed[0] >= 600, 'chunks arrive as printed, not at the end: ' + JSON.stringify(timed))
  step('streaming callbacks')

  const bg = await sbx.commands.run('sleep 120', { background: true, timeoutMs: 0 })
  check(typeof bg.pid === 'number' && bg.pid > 0, 'a background pid')
  const listed = await sbx.commands.list()
  const mine = listed.find((p) => p.pid === bg.pid)
  check(mine && mine.cmd === '/bin/bash' && mine.args.join(' ') === '-l -c sleep 120', 'commands.list: ' + JSON.stringify(listed))
  check((await bg.kill()) === true, 'kill of a running command')
  const killed = await rejects(bg.wait(), CommandExitError, 'wait of a killed command')
  check(killed.exitCode === -1 && /signal: killed/.test(killed.error), 'killed: ' + JSON.stringify(killed.result))
  check((await sbx.commands.list()).every((p) => p.pid !== bg.pid), 'a killed command is not listed')
  check((await sbx.commands.kill(bg.pid)) === false, 'kill of an ended command answers false')
  await rejects(sbx.commands.connect(4000000), NotFoundError, 'connect to an unknown pid')
  step('background, list, kill')

  const cat = await sbx.commands.run('cat', { background: true, stdin: true })
  await sbx.commands.sendStdin(cat.pid, 'from stdin\n')
  await cat.sendStdin('second line\n')
  await cat.closeStdin()
  const catted = await cat.wait()
  check(catted.stdout === 'from stdin\nsecond line\n', 'cat of stdin: ' + JSON.stringify(catted))
  step('stdin')

  // connect follows from now: the process waits for a line, so nothing
  // it prints can come before the connect.
  const waiter = await sbx.commands.run('read x; echo "got $x"; exit 4', { background: true, stdin: true })
  const joined = []
  const conn = await sbx.commands.connect(waiter.pid, { onStdout: (d) => joined.push(d) })
  await sbx.commands.sendStdin(waiter.pid, 'ping\n')
  const connErr = await rejects(conn.wait(), CommandExitError, 'wait of a connected command')
  check(connErr.exitCode === 4 && joined.join('') === 'got ping\n', 'connect: ' + JSON.stringify(connErr.result) + ' ' + JSON.stringify(joined))
  step('commands.connect')

  let screen = ''
  const dec = new TextDecoder()
  const term = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { screen += dec.decode(d, { stream: true }) } })
  check(typeof term.pid === 'number' && term.pid > 0, 'a terminal pid')
  await sbx.pty.sendInput(term.pid, new TextEncoder().encode('stty size; echo "term=$TERM"\n'))
  await until(() => /24 80/.test(screen) && /term=xterm-256color/.test(screen), 20000, 'stty size 24 80: ' + JSON.stringify(screen))
  await sbx.pty.resize(term.pid, { cols: 100, rows: 40 })
  await sbx.pty.sendInput(term.pid, new TextEncoder().encode('stty size\n'))
  await until(() => /40 100/.test(screen), 20000, 'stty size 40 100 after resize: ' + JSON.stringify(screen))
  check((await sbx.pty.kill(term.pid)) === true, 'kill of the terminal')
  const termErr = await rejects(term.wait(), CommandExitError, 'wait of a killed terminal')
  check(termErr.exitCode === -1, 'the terminal was killed: ' + JSON.stringify(termErr.result))
  step('pty create, sendInput, resize, kill')

  // 16 running commands are a sandbox's most: the 17th is refused as
  // the SDK's RateLimitError, and starts nothing.
  const running = []
  for (let i = 0; i < 16; i++) running.push(await sbx.commands.run('sleep 60', { background: true }))
  await rejects(sbx.commands.run('sleep 60', { background: true }), RateLimitError, 'a 17th running command')
  check((await sbx.commands.list()).length === 16, 'the refused command did not start')
  for (const h of running) {
    check((await h.kill()) === true, 'kill of a running command')
    await rejects(h.wait(), CommandExitError, 'wait of a killed command')
  }
  check((await sbx.commands.list()).length === 0, 'none left running')
  step('the process limit is a RateLimitError')
}
