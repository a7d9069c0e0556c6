// End-to-end test of the browser demo: serves web/dist on 127.0.0.1, drives
// Debian's Chromium (headless, WebGPU on SwiftShader) with playwright-core,
// trains a fixed number of steps from a fixed seed, checks the loss falls
// and the test accuracy, draws a digit on the pad, runs the conformance
// page, trains the GPT page's small model and generates text (from its
// weights and from a native checkpoint dropped on the page), checks the
// Hugging Face page against transformers' and PEFT's fixtures and
// fine-tunes there, runs the benchmark page, and fails on any GPU, WGSL or console error.
// Env: CHROMIUM (default /usr/bin/chromium), KILN_E2E_STEPS (default 300),
// KILN_NATIVE_LOSSES and KILN_NATIVE_GPT (the native runs to compare with),
// KILN_E2E_ONLY=gpt, =hf, =bench or =conformance (that page alone) or =pages
// (every page but the conformance page), KILN_BROWSER_BENCH=full
// (the benchmark page's full figures, written to
// docs/benchmarks-browser.tsv; by default one quick run of each),
// KILN_REQUIRE_ADAPTERS and KILN_REQUIRE (comma lists, as the native tests
// read them: `webgpu` must run the demo; a listed thing that is missing
// fails instead of being reported skipped).
import { chromium } from 'playwright-core';
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '../..');
const dist = path.join(root, 'web/dist');
const out = path.join(here, 'out');
const STEPS = Number(process.env.KILN_E2E_STEPS ?? 300);
const SEED = 7;
const MIN_ACCURACY = 0.8;

const types = { '.txt': 'text/plain', '.html': 'text/html', '.js': 'text/javascript', '.css': 'text/css', '.wasm': 'application/wasm', '.json': 'application/json' };

function serve() {
  const server = http.createServer((req, res) => {
    const url = new URL(req.url, 'http://x');
    const file = path.join(dist, path.normalize(decodeURIComponent(url.pathname)).replace(/^(\.\.[/\\])+/, ''));
    const target = file.endsWith(path.sep) ? path.join(file, 'index.html') : file;
    if (!target.startsWith(dist) || !fs.existsSync(target) || !fs.statSync(target).isFile()) {
      res.writeHead(404).end('not found');
      return;
    }
    // .gz files are data: served as bytes, never as a Content-Encoding.
    res.writeHead(200, { 'content-type': types[path.extname(target)] ?? 'application/octet-stream' });
    fs.createReadStream(target).pipe(res);
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

const problems = [];
function watch(page, name) {
  page.on('pageerror', (e) => problems.push(`${name}: page error: ${e.message}`));
  page.on('console', (m) => {
    const text = m.text();
    if (m.type() === 'error' || /WGSL|WebGPU|GPUValidationError|shader/i.test(text)) {
      problems.push(`${name}: console ${m.type()}: ${text}`);
    }
  });
}

const listed = (name) => (process.env[name] ?? '').split(',').map((s) => s.trim().toLowerCase()).filter(Boolean);
const required = (thing) => listed('KILN_REQUIRE').includes(thing) || listed('KILN_REQUIRE_ADAPTERS').includes(thing);

// A missing thing: a failure where the run requires it, else a counted line.
function skip(thing, why) {
  if (required(thing)) throw new Error(`${thing} is required by this run (KILN_REQUIRE) but ${why}`);
  console.log(`SKIPPED e2e: ${thing}: ${why}`);
}

function check(ok, message) {
  if (!ok) throw new Error(message);
  console.log(`ok: ${message}`);
}

async function waitFor(page, expr, timeoutMs) {
  await page.waitForFunction(expr, null, { timeout: timeoutMs, polling: 250 });
}

async function main() {
  if (!fs.existsSync(path.join(dist, 'index.html'))) throw new Error(`${dist} is not built: run web/build.sh`);
  fs.mkdirSync(out, { recursive: true });
  const server = await serve();
  const base = `http://127.0.0.1:${server.address().port}`;
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    args: [
      '--headless=new', '--no-sandbox', '--enable-unsafe-webgpu', '--enable-features=Vulkan',
      '--use-vulkan=swiftshader', '--use-webgpu-adapter=swiftshader', '--disable-vulkan-surface',
      '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update',
      '--disable-sync',
    ],
  });
  try {
    const only = { gpt: gptPage, hf: hfPage, bench: benchPage, conformance: conformancePage }[process.env.KILN_E2E_ONLY];
    if (only) {
      await only(browser, base);
      check(problems.length === 0, `no GPU, WGSL or console errors${problems.length ? ':\n' + problems.join('\n') : ''}`);
      return;
    }
    const page = await browser.newPage({ viewport: { width: 1100, height: 900 } });
    watch(page, 'demo');
    const t0 = Date.now();
    await page.goto(`${base}/index.html?seed=${SEED}&steps=${STEPS}`);
    await waitFor(page, () => ['done', 'error'].includes(window.demo?.status), 15 * 60_000);
    const demo = await page.evaluate(() => window.demo);
    check(!demo.error, `the demo trained without errors${demo.error ? `: ${demo.error}` : ''}`);
    console.log(`adapter: ${demo.adapter.label}`);
    if (required('webgpu')) check(Boolean(demo.adapter?.label), `the required WebGPU adapter ran the demo: ${demo.adapter?.label}`);
    check(demo.steps === STEPS, `trained ${demo.steps} steps (seed ${SEED}) in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    const losses = demo.losses.map(([, l]) => l);
    const first = losses[0], last = losses.slice(-5).reduce((a, b) => a + b) / 5;
    check(losses.every(Number.isFinite), 'every loss is finite');
    check(first > 2.0 && last < 0.6 * first, `loss falls: ${first.toFixed(4)} -> ${last.toFixed(4)} (mean of the last 5 chunks)`);
    const accuracy = demo.accuracies.at(-1)[1];
    check(accuracy >= MIN_ACCURACY, `test accuracy ${(100 * accuracy).toFixed(1)}% >= ${100 * MIN_ACCURACY}%`);
    console.log(`steps/s: ${demo.stepsPerSecond.toFixed(1)} (batch 64, 784-512-10 MLP, headless Chromium on SwiftShader)`);
    await page.click('#quantize');
    await waitFor(page, () => window.demo.quantized !== null || window.demo.error !== null, 5 * 60_000);
    const quantized = await page.evaluate(() => window.demo.quantized);
    for (const [name, q] of Object.entries(quantized ?? { int8: NaN, int4: NaN })) {
      check(Math.abs(q - accuracy) <= 0.02, `the trained weights in ${name}: test accuracy ${(100 * q).toFixed(1)}% (f32 ${(100 * accuracy).toFixed(1)}%)`);
    }

    // Draw a "1" on the pad with the mouse.
    const box = await page.locator('#pad').boundingBox();
    const p = (x, y) => [box.x + box.width * x, box.y + box.height * y];
    await page.mouse.move(...p(0.55, 0.15));
    await page.mouse.down();
    for (const [x, y] of [[0.5, 0.5], [0.45, 0.85]]) await page.mouse.move(...p(x, y), { steps: 10 });
    await page.mouse.up();
    await waitFor(page, () => window.demo.prediction !== null, 60_000);
    const prediction = await page.evaluate(() => window.demo.prediction);
    const total = prediction.probs.reduce((a, b) => a + b);
    check(prediction.probs.length === 10 && Math.abs(total - 1) < 1e-3, `a prediction appears: ${prediction.digit} (probabilities sum to ${total.toFixed(4)})`);
    check((await page.textContent('#prediction')) === String(prediction.digit), 'the page shows the predicted digit');
    await page.screenshot({ path: path.join(root, 'docs/web-demo.png'), fullPage: true });
    fs.writeFileSync(path.join(out, 'demo.json'), JSON.stringify({ ...demo, quantized, prediction }, null, 1));

    // The same seed, step by step, against the native run of the same code
    // on SwiftShader Vulkan (web/examples/native_losses.rs).
    const nativeFile = process.env.KILN_NATIVE_LOSSES;
    if (nativeFile) {
      const native = JSON.parse(fs.readFileSync(nativeFile, 'utf8'));
      const steps = native.losses.length;
      const again = await browser.newPage();
      watch(again, 'determinism');
      // With the matmul tuner on, which kiln leaves off for CPU adapters
      // like this one: the tuned configs must not change the losses.
      await again.goto(`${base}/index.html?seed=${native.seed}&steps=${steps}&chunk=1&tune=1`);
      await waitFor(again, () => ['done', 'error'].includes(window.demo?.status), 5 * 60_000);
      const run = await again.evaluate(() => window.demo);
      check(!run.error && run.losses.length === steps, `the browser ran ${steps} single steps${run.error ? `: ${run.error}` : ''}`);
      const choices = run.matmulChoices ?? [];
      check(choices.length > 0, `the browser tuned its matmuls (kept in memory): ${choices.map(([c, k]) => `${c} -> ${k}`).join(', ')}`);
      const worst = Math.max(...run.losses.map(([, l], i) => Math.abs(l - native.losses[i]) / Math.abs(native.losses[i])));
      fs.writeFileSync(path.join(out, 'determinism.json'), JSON.stringify({ native, browser: run.losses.map(([, l]) => l), worst }, null, 1));
      check(worst <= 1e-3, `seed ${native.seed}: the first ${steps} losses match native ${native.adapter} within ${worst.toExponential(2)} relative (<= 1e-3)`);
      await again.close();
    } else {
      skip('native-comparison', 'KILN_NATIVE_LOSSES is not set (to native_losses output)');
    }

    await gptPage(browser, base);
    await hfPage(browser, base);
    await benchPage(browser, base);

    if (process.env.KILN_E2E_ONLY !== 'pages') await conformancePage(browser, base);
    check(problems.length === 0, `no GPU, WGSL or console errors${problems.length ? ':\n' + problems.join('\n') : ''}`);
  } finally {
    await browser.close();
    server.close();
  }
}

// The conformance page: every case, gradient, vmap check and the matmul
// family on WebGPU against the CPU reference, and the browser column of
// docs/CONFORMANCE.md (docs/conformance-browser.tsv).
async function conformancePage(browser, base) {
  const tc = Date.now();
  const conf = await browser.newPage();
  watch(conf, 'conformance');
  await conf.goto(`${base}/conformance.html`);
  await waitFor(conf, () => window.conformance?.done, 20 * 60_000);
  const summary = await conf.evaluate(() => window.conformance);
  fs.writeFileSync(path.join(out, 'conformance.json'), JSON.stringify(summary, null, 1));
  // The browser column of docs/CONFORMANCE.md (read by kiln-conformance's
  // `conformance` binary; format in tests/src/browser.rs).
  const field = (v) => String(v ?? '').replace(/[\t\r\n]+/g, ' ');
  const tsv = [`adapter\t${field(summary.adapter?.label)}`, ...summary.cases.map((c) =>
    [c.op, c.detail, c.passed ? 1 : 0, c.max_abs_err ?? '', c.failure ?? ''].map(field).join('\t'))];
  fs.writeFileSync(path.join(root, 'docs/conformance-browser.tsv'), tsv.join('\n') + '\n');
  check(!summary.error, `the conformance page ran${summary.error ? `: ${summary.error}` : ''}`);
  for (const c of summary.cases.filter((c) => !c.passed)) console.log(`FAILED ${c.op} [${c.detail}]: ${c.failure}`);
  const family = summary.matmul_family ?? { checked: 0, skipped: [], failures: ['did not run'] };
  for (const s of family.skipped) console.log(`skipped in the browser: ${s}`);
  if (!summary.adapter?.shader_f16) console.log('skipped in the browser: f16 arithmetic (the adapter has no shader-f16; f16 ran packed, computed in f32)');
  check(family.failures.length === 0 && family.checked > 0, `matmul kernel family in the browser: ${family.checked} (case, config) pairs match the reference${family.failures.length ? '; failures:\n' + family.failures.join('\n') : ''}`);
  const reductions = summary.workgroup_reductions ?? { failures: ['did not run'] };
  check(reductions.failures.length === 0, `reductions through workgroup memory in the browser match the reference${reductions.failures.length ? ':\n' + reductions.failures.join('\n') : ''}`);
  const attention = summary.fused_attention ?? { failures: ['did not run'] };
  check(attention.failures.length === 0, `attention as one kernel in the browser matches the reference${attention.failures.length ? ':\n' + attention.failures.join('\n') : ''}`);
  const vmapped = summary.cases.filter((c) => c.op.startsWith('vmap: '));
  check(vmapped.length > 0 && vmapped.every((c) => c.passed), `batching checks (vmap) in the browser: ${vmapped.filter((c) => c.passed).length} of ${vmapped.length} match the stacked examples (${summary.skipped.length} cases without inputs skipped)`);
  const perExample = summary.cases.filter((c) => c.op.startsWith('vmap(grad): '));
  check(perExample.length > 0 && perExample.every((c) => c.passed), `per-example gradients (vmap of grad) in the browser: ${perExample.filter((c) => c.passed).length} of ${perExample.length} match the stacked vjps`);
  const composed = summary.cases.filter((c) => c.op.startsWith('vmap composition: '));
  check(composed.length > 0 && composed.every((c) => c.passed), `vmap against a loop and composed with grad, jit and itself in the browser: ${composed.filter((c) => c.passed).length} of ${composed.length} pass`);
  check(summary.failed === 0 && summary.passed > 0, `conformance in the browser: ${summary.passed} passed, ${summary.failed} failed (${summary.pipelines} kernels compiled by Dawn) in ${((Date.now() - tc) / 1000).toFixed(1)} s`);
  await conf.close();
}

// The GPT page with a small model (the numbers of
// web/examples/native_gpt.rs): 200 steps, the loss falls, samples appear,
// the prompt box generates; the first losses match the native run, and the
// native run's checkpoint, dropped on the page, generates the native text.
async function gptPage(browser, base) {
  const t0 = Date.now();
  const page = await browser.newPage();
  watch(page, 'gpt');
  const config = 'seed=3&total=200&context=32&width=32&heads=2&layers=2&batch=8';
  await page.goto(`${base}/gpt.html?${config}&steps=200&chunk=10&eval=50`);
  await waitFor(page, () => ['done', 'error'].includes(window.gpt?.status), 10 * 60_000);
  const run = await page.evaluate(() => window.gpt);
  check(!run.error && run.steps === 200, `the GPT page trained ${run.steps} steps in ${((Date.now() - t0) / 1000).toFixed(1)} s${run.error ? `: ${run.error}` : ''}`);
  const bits = run.losses.map(([, b]) => b);
  const first = bits[0], last = bits.slice(-10).reduce((a, b) => a + b) / 10;
  check(bits.length === 200 && bits.every(Number.isFinite), 'every GPT loss is finite');
  check(last < 0.75 * first, `GPT loss falls: ${first.toFixed(3)} -> ${last.toFixed(3)} bits/char (mean of the last 10 steps)`);
  const valid = run.validation.map(([, b]) => b);
  check(valid.length >= 2 && valid.at(-1) < valid[0], `GPT validation falls: ${valid.map((b) => b.toFixed(2)).join(', ')} bits/char`);
  check(run.samples.length > 0 && run.samples.at(-1)[1].length === 200, `the page shows samples as it learns (${run.samples.length})`);
  console.log(`GPT characters/s: ${run.charsPerSecond.toFixed(0)} (${run.parameters} parameters, headless Chromium on SwiftShader)`);
  await page.fill('#prompt', 'And God');
  await page.fill('#tokens', '80');
  await page.click('#generate');
  await waitFor(page, () => window.gpt.generated !== null || window.gpt.error, 120_000);
  const generated = await page.evaluate(() => window.gpt.generated);
  check(generated?.startsWith('And God') && generated.length === 87, `the prompt box generates from the trained weights: ${JSON.stringify(generated)}`);

  const nativeFile = process.env.KILN_NATIVE_GPT;
  if (!nativeFile) {
    skip('native-comparison', 'KILN_NATIVE_GPT is not set (to native_gpt\'s JSON)');
    await page.close();
    return;
  }
  const native = JSON.parse(fs.readFileSync(nativeFile, 'utf8'));
  const worst = Math.max(...native.losses.map((l, i) => Math.abs(bits[i] - l) / Math.abs(l)));
  check(worst <= 1e-3, `seed 3: the first ${native.losses.length} GPT losses match native ${native.adapter} within ${worst.toExponential(2)} relative (<= 1e-3)`);
  await page.evaluate(() => { window.gpt.generated = null; });
  // Dropped on the page, as a user drags the file from their desktop.
  const bytes = fs.readFileSync(native.checkpoint).toString('base64');
  const dropped = await page.evaluateHandle((b64) => {
    const data = new DataTransfer();
    data.items.add(new File([Uint8Array.from(atob(b64), (c) => c.charCodeAt(0))], 'gpt.safetensors'));
    return data;
  }, bytes);
  await page.dispatchEvent('body', 'drop', { dataTransfer: dropped });
  await waitFor(page, () => document.getElementById('loaded').textContent !== '' || window.gpt.error, 60_000);
  await page.fill('#prompt', native.prompt);
  await page.fill('#tokens', String(native.tokens));
  await page.fill('#temperature', '0.8');
  await page.fill('#topk', '10');
  await page.fill('#seed', String(native.seed));
  await page.click('#generate');
  await waitFor(page, () => window.gpt.generated !== null || window.gpt.error, 120_000);
  const fromCheckpoint = await page.evaluate(() => window.gpt.generated);
  check(fromCheckpoint === native.prompt + native.generated, `the dropped native checkpoint generates the native text from the same key: ${JSON.stringify(fromCheckpoint)}`);
  await page.close();
}

// A safetensors file's tensors: { name: { dtype, shape, data } }, data as
// an Int32Array or Float32Array.
function readSafetensors(file) {
  const bytes = fs.readFileSync(file);
  const n = Number(bytes.readBigUInt64LE(0));
  const header = JSON.parse(bytes.subarray(8, 8 + n).toString('utf8'));
  const tensors = {};
  for (const [name, t] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    const [a, b] = t.data_offsets;
    const raw = bytes.subarray(8 + n + a, 8 + n + b);
    const copy = new Uint8Array(raw).buffer;
    tensors[name] = { dtype: t.dtype, shape: t.shape, data: t.dtype === 'I32' ? new Int32Array(copy) : new Float32Array(copy) };
  }
  return tensors;
}

// Largest |a - b| over the largest |b|.
function relativeError(got, want) {
  let scale = 0, worst = 0;
  for (let i = 0; i < want.length; i++) {
    scale = Math.max(scale, Math.abs(want[i]));
    worst = Math.max(worst, Math.abs(got[i] - want[i]));
  }
  return worst / scale;
}

// The Hugging Face page against the fixtures of models/tests (transformers'
// logits, greedy tokens and token ids; PEFT's adapted logits): each folder
// chosen in the file picker (the sharded Llama dropped on the page), with
// the bounds of models/tests/transformers.rs; then a LoRA fine-tune of the
// GPT-2 fixture, whose validation loss must fall, and generation from the
// page's controls with its rates.
async function hfPage(browser, base) {
  const t0 = Date.now();
  const fixtures = path.join(root, 'models/tests/fixtures');
  const page = await browser.newPage();
  watch(page, 'hf');
  await page.goto(`${base}/hf.html`);
  await waitFor(page, () => window.hf?.status === 'choose or drop a model folder' || window.hf?.error, 120_000);
  const filesOf = (name) => fs.readdirSync(path.join(fixtures, name))
    .filter((f) => !['expected.safetensors', 'samples.json'].includes(f)).map((f) => path.join(fixtures, name, f));
  const load = async (name, how) => {
    await page.evaluate(() => { window.hf.status = 'loading'; });
    if (how === 'drop') {
      const files = filesOf(name).map((f) => ({ name: path.basename(f), b64: fs.readFileSync(f).toString('base64') }));
      const dropped = await page.evaluateHandle((list) => {
        const data = new DataTransfer();
        for (const { name, b64 } of list) data.items.add(new File([Uint8Array.from(atob(b64), (c) => c.charCodeAt(0))], name));
        return data;
      }, files);
      await page.dispatchEvent('body', 'drop', { dataTransfer: dropped });
    } else {
      await page.setInputFiles('#files', filesOf(name));
    }
    await waitFor(page, () => window.hf.status.startsWith('ready') || window.hf.error, 120_000);
    const state = await page.evaluate(() => ({ error: window.hf.error, description: window.hf.description }));
    check(!state.error, `${name} loads on the page (${how === 'drop' ? 'dropped' : 'chosen'}): ${state.error ?? state.description}`);
  };
  const logits = (ids, rows) => page.evaluate(async ([ids, rows]) => Array.from(await window.hf.model.logits(Int32Array.from(ids), rows)), [ids, rows]);
  const bounds = { gpt2: 1e-4, llama: 1e-4, 'gpt2-f16': 2e-3, 'llama-bf16': 1.5e-2 };
  for (const [name, bound] of Object.entries(bounds)) {
    await load(name, name === 'llama' ? 'drop' : 'pick');
    const want = readSafetensors(path.join(fixtures, name, 'expected.safetensors'));
    const ids = Array.from(want.input_ids.data);
    const error = relativeError(await logits(ids, 2), want.logits.data);
    check(error <= bound, `${name} in the browser: logits within ${error.toExponential(1)} of transformers' (bound ${bound})`);
    if (!name.includes('-')) {
      const prompt = ids.slice(0, want.input_ids.shape[1]);
      const greedy = await page.evaluate(async ([p, n]) => Array.from(await window.hf.model.greedy(Uint32Array.from(p), n)), [prompt, want.greedy.data.length]);
      check(greedy.join(',') === Array.from(want.greedy.data).join(','), `${name} in the browser: transformers' ${greedy.length} greedy tokens, through the KV cache`);
      const samples = JSON.parse(fs.readFileSync(path.join(fixtures, name, 'samples.json'), 'utf8'));
      const lengths = Array.from(want.sample_lengths.data), expectedIds = Array.from(want.sample_ids.data);
      let at = 0;
      for (const [i, text] of samples.entries()) {
        const got = await page.evaluate((t) => Array.from(window.hf.model.encode(t)), text);
        check(got.join(',') === expectedIds.slice(at, at + lengths[i]).join(','), `${name} in the browser: the Python tokenizer's ids for ${JSON.stringify(text)}`);
        at += lengths[i];
      }
    }
  }
  // PEFT's adapters on the GPT-2 fixture.
  await load('gpt2', 'pick');
  await page.setInputFiles('#adapters', ['adapter_config.json', 'adapter_model.safetensors'].map((f) => path.join(fixtures, 'gpt2-lora', f)));
  await waitFor(page, () => window.hf.status.includes('LoRA') || window.hf.error, 60_000);
  const lora = readSafetensors(path.join(fixtures, 'gpt2-lora', 'expected.safetensors'));
  const loraError = relativeError(await logits(Array.from(lora.input_ids.data), 2), lora.logits.data);
  check(loraError <= 1e-4, `PEFT's adapters in the browser: logits within ${loraError.toExponential(1)} of PEFT's`);
  // A fine-tune from the page's controls: the native test's run.
  await load('gpt2', 'pick');
  for (const [id, v] of [['rank', 8], ['steps', 40], ['lr', 0.01], ['context', 32], ['batch', 8], ['seed', 0]]) await page.fill(`#${id}`, String(v));
  const t1 = Date.now();
  await page.click('#finetune');
  await waitFor(page, () => window.hf.adapters !== null || window.hf.error, 10 * 60_000);
  const tuned = await page.evaluate(() => ({ error: window.hf.error, validation: window.hf.validation, losses: window.hf.losses.length, config: window.hf.adapters?.config, bytes: window.hf.adapters?.weights.length }));
  check(!tuned.error && tuned.losses === 40, `the page fine-tuned 40 LoRA steps in ${((Date.now() - t1) / 1000).toFixed(1)} s${tuned.error ? `: ${tuned.error}` : ''}`);
  const valid = tuned.validation.map(([, l]) => l);
  check(valid.at(-1) < valid[0] - 0.05, `LoRA fine-tuning in the browser lowers the validation loss: ${valid.map((l) => l.toFixed(3)).join(' -> ')} nats/token`);
  const config = JSON.parse(tuned.config);
  check(config.peft_type === 'LORA' && config.r === 8 && tuned.bytes > 0, `the adapters to download are PEFT's files (r ${config.r}, ${tuned.bytes} bytes of weights)`);
  // Generation from the page's controls, with the fine-tuned adapters.
  await page.fill('#prompt', 'In the beginning');
  await page.fill('#tokens', '24');
  await page.fill('#temperature', '0');
  await page.click('#generate');
  await waitFor(page, () => window.hf.generated !== null || window.hf.error, 120_000);
  const generated = await page.evaluate(() => window.hf.generated);
  check(generated?.text.startsWith('In the beginning') && generated.tokens.length === 24, `the page generates: ${JSON.stringify(generated?.text)}`);
  await page.screenshot({ path: path.join(root, 'docs/web-hf.png'), fullPage: true });
  console.log(`HF page: ${(await page.textContent('#rates'))} (the GPT-2 fixture with adapters, headless Chromium on SwiftShader)`);
  console.log(`the Hugging Face page ran in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  await page.close();
}

// The benchmark page: kiln-bench's GPT rows in the browser. Every figure
// must be a positive rate, and the training step one submit (plus the
// loss's readback). With KILN_BROWSER_BENCH=full: three timed runs of each
// at T = 128, 512 and 2048, written to docs/benchmarks-browser.tsv; else
// one quick run of each, a small GPT's step and T = 128 only.
async function benchPage(browser, base) {
  const full = process.env.KILN_BROWSER_BENCH === 'full';
  const t0 = Date.now();
  const page = await browser.newPage();
  watch(page, 'bench');
  const contexts = full ? [128, 512, 2048] : [128];
  await page.goto(`${base}/bench.html?contexts=${contexts}&${full ? 'reps=3' : 'reps=1&tokens=8&small=1'}`);
  await waitFor(page, () => ['done', 'error'].includes(window.bench?.status), 30 * 60_000);
  const run = await page.evaluate(() => window.bench);
  check(!run.error, `the benchmark page ran in ${((Date.now() - t0) / 1000).toFixed(1)} s${run.error ? `: ${run.error}` : ''}`);
  const fraction = (r) => (r.fraction ? ` = ${r.fraction.toFixed(3)} of the FMA ceiling` : '');
  for (const r of run.rows) console.log(`  ${r.bench}: ${r.value.toFixed(2)} ${r.unit}${fraction(r)} (${r.low.toFixed(2)}–${r.high.toFixed(2)}) ${r.note}`);
  check(run.rows.length === 2 * contexts.length + 4 && run.rows.every((r) => r.value > 0 && Number.isFinite(r.value)), `${run.rows.length} benchmark figures, each a positive rate`);
  const step = run.rows.find((r) => r.bench.startsWith('gpt train step'));
  const submits = Number(/(\d+) submits per step/.exec(step?.note ?? '')?.[1]);
  check(submits <= 2, `the GPT training step in the browser is one submit, plus the loss's readback: ${step?.note}`);
  fs.writeFileSync(path.join(out, 'bench.json'), JSON.stringify(run, null, 1));
  if (full) {
    const lines = [['bench', 'value', 'low', 'high', 'unit', 'fraction of the FMA ceiling', 'note'].join('\t')];
    for (const r of run.rows) lines.push([r.bench, r.value.toFixed(2), r.low.toFixed(2), r.high.toFixed(2), r.unit, r.fraction?.toFixed(3) ?? '', r.note].join('\t'));
    const file = path.join(root, 'docs/benchmarks-browser.tsv');
    fs.writeFileSync(file, `# ${run.adapter.label}; ${new Date().toISOString().slice(0, 16)} UTC; medians of 3 runs after a warm-up\n${lines.join('\n')}\n`);
    console.log(`wrote ${file}`);
  }
  await page.close();
}

main().then(
  () => console.log('e2e: passed'),
  (e) => {
    console.error(`e2e: FAILED: ${e.message}`);
    if (problems.length) console.error(problems.join('\n'));
    process.exit(1);
  },
);
