// OpenAI's Agents SDK with its E2B sandbox backend against sandpoold (docs/e2b.md), run by
// tests/integration/test-e2b.sh: a SandboxAgent of @openai/agents 0.20.0 whose sandbox comes from
// E2BSandboxClient (@openai/agents-extensions 0.18.0, which has its own @openai/agents-core 0.18.0
// and drives the e2b SDK 2.51.0), its turns played by the SDK's ScriptedModel: no model, no
// network. The e2b SDK under the backend reads E2B_API_KEY, E2B_API_URL and E2B_SANDBOX_URL from
// the environment, which the suite sets. Every effect is also checked from outside the run:
// through the e2b SDK (Sandbox.list, connect, files.read) and the daemon's control plane.
import './no-dns.mjs';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Runner } from '@openai/agents';
import { SandboxAgent, file, filesystem, shell } from '@openai/agents/sandbox';
import { ScriptedModel, assistantMessage, functionCall, modelResponder } from '@openai/agents/testing';
import { E2BSandboxClient } from '@openai/agents-extensions/sandbox/e2b';
import { Sandbox } from 'e2b';

for (const name of ['E2B_API_KEY', 'E2B_API_URL', 'E2B_SANDBOX_URL']) {
    if (!process.env[name]) throw new Error(`${name} is not set (run tests/integration/test-e2b.sh)`);
}

const runner = new Runner({ tracingDisabled: true });
const agentWith = (model) => new SandboxAgent({
    name: 'sandpool', instructions: 'Work in the sandbox.', model, capabilities: [shell(), filesystem()],
});
// One model turn: the exec_command tool (the shell capability) with cmd.
const exec = (callId, cmd) => [functionCall('exec_command', { cmd }, { callId })];
// One model turn: the hosted apply_patch tool (the filesystem capability) with one operation.
const patch = (callId, operation) => [{ type: 'apply_patch_call', callId, status: 'completed', operation }];
// The run's tool results by call id, as text; what an exec_command result says the command printed.
const outputs = (result) => Object.fromEntries(result.newItems
    .filter((i) => i.type === 'tool_call_output_item')
    .map((i) => [i.rawItem.callId, typeof i.rawItem.output === 'string'
        ? i.rawItem.output : i.rawItem.output?.text ?? '']));
const printed = (text) => text.slice(text.indexOf('Output:\n') + 'Output:\n'.length);
// The sandbox as the daemon's control plane tells it: {status, body}, 404 once it is gone.
const control = async (id) => {
    const res = await fetch(`${process.env.E2B_API_URL}/sandboxes/${id}`,
        { headers: { 'X-API-KEY': process.env.E2B_API_KEY } });
    return { status: res.status, body: await res.json() };
};
// The ids of the sandboxes made with metadata {suite: tag}; cleanup kills what a failure left.
const listed = async (tag) =>
    (await Sandbox.list({ query: { metadata: { suite: tag } } }).nextItems()).map((s) => s.sandboxId);
const cleanup = (t, tag) => t.after(async () => {
    for (const id of await listed(tag).catch(() => [])) await Sandbox.kill(id).catch(() => {});
});

test('a turn on a sandbox the runner creates: exec_command and apply_patch act in its workspace, the final output is the scripted one, the sandbox is killed at the end', async (t) => {
    const tag = `oa${Date.now()}`;
    cleanup(t, tag);
    const nonce = `n${Math.random().toString(36).slice(2)}`;
    const seen = {}; // the sandbox from outside, while the run holds it
    const model = new ScriptedModel([
        exec('c1', `echo ${nonce} > out.txt && cat out.txt && pwd && test -w /workspace && echo writable`),
        patch('p1', { type: 'create_file', path: 'notes/plan.md', diff: '+# plan\n+step one\n+step two\n' }),
        patch('p2', { type: 'update_file', path: 'notes/plan.md', diff: '@@\n # plan\n-step one\n+step 1\n' }),
        exec('c2', 'cat notes/plan.md'),
        modelResponder(async () => {
            seen.ids = await listed(tag);
            const sbx = await Sandbox.connect(seen.ids[0]);
            seen.out = await sbx.files.read('/workspace/out.txt');
            seen.plan = await sbx.files.read('/workspace/notes/plan.md');
            return [assistantMessage(`wrote ${nonce}`)];
        }),
    ]);
    const client = new E2BSandboxClient({ timeout: 300, metadata: { suite: tag } });
    const result = await runner.run(agentWith(model), 'Write the file and the plan.', { sandbox: { client } });

    assert.equal(result.finalOutput, `wrote ${nonce}`);
    model.assertComplete();
    const out = outputs(result);
    assert.match(out.c1, /Process exited with code 0/);
    assert.equal(printed(out.c1), `${nonce}\n/workspace\nwritable\n`);
    assert.ok(!/fail/i.test(`${out.p1} ${out.p2}`), `apply_patch said: ${out.p1} / ${out.p2}`);
    assert.equal(printed(out.c2), '# plan\nstep 1\nstep two'); // apply_patch writes no final newline
    assert.ok(JSON.stringify(model.calls[1].request.input).includes(nonce), 'the model got the output');
    // From outside: the run had one sandbox, and the files are in its workspace.
    assert.equal(seen.ids.length, 1);
    assert.equal(seen.out, `${nonce}\n`);
    assert.equal(seen.plan, '# plan\nstep 1\nstep two');
    // The runner created the sandbox, so it killed it before run() returned.
    assert.deepEqual(await listed(tag), []);
    assert.equal((await control(seen.ids[0])).status, 404);
});

test('a session the app creates (a file in its manifest) serves the run and outlives it; delete() kills it, a close() after is no error', async (t) => {
    const tag = `oa${Date.now()}`;
    cleanup(t, tag);
    const client = new E2BSandboxClient({ timeout: 300, metadata: { suite: tag } });
    const session = await client.create({
        manifest: { entries: { 'data/in.txt': file({ content: 'from the manifest\n' }) } },
    });
    const id = session.state.sandboxId;
    assert.deepEqual(await listed(tag), [id]);
    const model = new ScriptedModel([
        exec('c1', 'cat data/in.txt && echo made > data/out.txt'),
        [assistantMessage('read it')],
    ]);
    const result = await runner.run(agentWith(model), 'Read the input.', { sandbox: { session } });
    assert.equal(result.finalOutput, 'read it');
    assert.equal(printed(outputs(result).c1), 'from the manifest\n');
    // The app's session, not the runner's: still running, with both files.
    const info = await control(id);
    assert.equal(info.status, 200);
    assert.equal(info.body.state, 'running');
    const sbx = await Sandbox.connect(id);
    assert.equal(await sbx.files.read('/workspace/data/in.txt'), 'from the manifest\n');
    assert.equal(await sbx.files.read('/workspace/data/out.txt'), 'made\n');

    await session.delete();
    assert.equal((await control(id)).status, 404);
    await session.close(); // a second kill: the daemon's JSON 404, which the e2b SDK reads as false
    assert.deepEqual(await listed(tag), []);
});
