// E2B's network options, network update, fork and metrics through E2B's
// own JavaScript SDK, unchanged (TestE2BSDKNetwork), against the real
// server, its egress proxy and the test's fake internet. Environment:
// E2B_SDK, E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY (a plan with
// allowed_domains), PRO_KEY (a plan without), FAKE_CA (the fake
// internet's CA, PEM). Prints one line per step and "E2B NETWORK OK" at
// the end; any failure exits non-zero.
'use strict'
const path = require('path')
const e2b = require(path.join(process.env.E2B_SDK, 'e2b'))
const { Sandbox, SandboxError, CommandExitError, ALL_TRAFFIC } = e2b

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

// reaches runs curl to host in sbx: true when it answered, false when the
// egress proxy refused it (a non-zero exit), anything else fails.
async function reaches(sbx, host) {
  const cmd = `curl -sS --max-time 20 --cacert ~/fake-ca.pem https://${host}/`
  try {
    const r = await sbx.commands.run(cmd, { timeoutMs: 60_000 })
    check(r.stdout.includes('hello ' + host), `curl ${host}: ${r.stdout}`)
    return true
  } catch (err) {
    if (err instanceof CommandExitError) {
      // Refused by the proxy (403 to CONNECT) or by its DNS (no answer
      // for a name the list does not hold); any other failure is a fault.
      check(/403|Could not resolve/.test(err.stderr), `curl ${host} failed but was not refused: ${err.stderr}`)
      return false
    }
    throw err
  }
}

async function main() {
  const open = await rejects(Sandbox.create('base', { allowInternetAccess: true }), SandboxError, 'internet access alone')
  check(open.message.includes('400') && open.message.includes('allowOut'), 'the refusal says what to send: ' + open.message)
  const denyOnly = await rejects(Sandbox.create('base', { network: { denyOut: ['203.0.113.0/24'] } }), SandboxError, 'a deny-list alone')
  check(denyOnly.message.includes('allowOut'), 'the refusal says what to send: ' + denyOnly.message)
  step('internet access and a deny-list alone are refused')

  const plan = await rejects(Sandbox.create('base', { apiKey: process.env.PRO_KEY, network: { allowOut: ['www.allowed.test'] } }), SandboxError, 'allowOut on a plan without allowed_domains')
  check(plan.message.startsWith('403'), "the plan's refusal is the API's 403: " + plan.message)
  step("the plan's refusal is the SDK's error")

  const sbx = await Sandbox.create('base', {
    network: { allowOut: ['www.allowed.test'], denyOut: [ALL_TRAFFIC] },
    timeoutMs: 300_000,
    metadata: { suite: 'network' },
    envs: { KEPT: 'yes' },
  })
  await sbx.files.write('/home/user/fake-ca.pem', process.env.FAKE_CA)
  check(await reaches(sbx, 'www.allowed.test'), 'the allowed host is reached')
  check(!(await reaches(sbx, 'api.allowed.test')), 'a host not in allowOut is refused')
  const info = await sbx.getInfo()
  check(info.network && JSON.stringify(info.network.allowOut) === '["www.allowed.test"]' && info.network.denyOut.includes(ALL_TRAFFIC),
    'getInfo reports the allow-list: ' + JSON.stringify(info.network))
  step('create with allowOut')

  await sbx.updateNetwork({ allowOut: ['www.allowed.test', 'api.allowed.test'] })
  check(await reaches(sbx, 'api.allowed.test'), 'widened: the added host is reached')
  await sbx.updateNetwork({ allowOut: ['api.allowed.test'] })
  check(!(await reaches(sbx, 'www.allowed.test')), 'narrowed: the removed host is refused')
  check(await reaches(sbx, 'api.allowed.test'), 'narrowed: the kept host is reached')
  await rejects(sbx.updateNetwork({ allowInternetAccess: true }), SandboxError, 'an update to internet access')
  check(await reaches(sbx, 'api.allowed.test'), 'a refused update changed nothing')
  step('network update widens then narrows')

  await sbx.files.write('/home/user/forked.txt', 'from the source')
  const forks = await sbx.fork({ timeoutMs: 120_000 })
  check(forks.length === 1 && forks[0] instanceof Sandbox, 'one fork: ' + forks)
  const child = forks[0]
  check(child.sandboxId !== sbx.sandboxId, 'the fork is a new sandbox')
  check((await child.files.read('/home/user/forked.txt')) === 'from the source', 'the fork has the files')
  const env = await child.commands.run('echo $KEPT')
  check(env.stdout.trim() === 'yes', 'the fork keeps the env vars: ' + env.stdout)
  check(await reaches(child, 'api.allowed.test'), 'the fork keeps the network')
  const cinfo = await child.getInfo()
  check(cinfo.state === 'running' && cinfo.metadata.suite === 'network', 'the fork runs, with the metadata: ' + JSON.stringify(cinfo))
  await child.files.write('/home/user/forked.txt', 'changed in the fork')
  check((await sbx.files.read('/home/user/forked.txt')) === 'from the source', 'a write in the fork does not reach the source')
  step('fork keeps files, env vars and network')

  const metrics = await sbx.getMetrics()
  check(metrics.length === 1, 'one sample: ' + JSON.stringify(metrics))
  const m = metrics[0]
  check(m.timestamp instanceof Date && Math.abs(Date.now() - m.timestamp.getTime()) < 60_000, 'timestamp now: ' + m.timestamp)
  check(m.diskTotal >= 1 << 20 && m.cpuCount === 1, 'disk size and CPU count: ' + JSON.stringify(m))
  check(m.memUsed === 0 && m.cpuUsedPct === 0 && m.diskUsed === 0, 'what is not measured is 0: ' + JSON.stringify(m))
  step('getMetrics')

  check(await child.kill(), 'kill the fork')
  check(await sbx.kill(), 'kill')
  console.log('E2B NETWORK OK')
}

// Exit once main is done: a timer the SDK leaves armed (as
// @e2b/code-interpreter's runCode does with its 60 s request timer when
// the server answers an error) must not keep node, and the test waiting
// on it, idle.
main().then(() => process.exit(0), (err) => {
  console.error(err && err.stack ? err.stack : err)
  process.exit(1)
})
