// The GPT page: trains kiln-gpt's model through kiln's wasm API, yielding to
// the event loop between chunks of steps, with the loss curve, samples as it
// learns, and generation from the trained weights or a dropped checkpoint.
// URL options: steps (stop there), seed, and the run's config: context,
// width, heads, layers, batch, total (its steps), lr.
import init, { Gpu, GptTrainer, GptModel } from './pkg/kiln_web.js';
import { describeAdapter, startGpu } from './adapter.js';
import { TrainingLoop, drawCurves, oneAtATime, yieldToBrowser } from './training.js';

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const STEPS_PER_CHUNK = Number(params.get('chunk') ?? 5);
const EVAL_EVERY = Number(params.get('eval') ?? 100);
const SAMPLE_EVERY = 2 * EVAL_EVERY;

// State the page (and the end-to-end test) reads: window.gpt.
const gpt = { status: 'loading', losses: [], validation: [], samples: [], generated: null, steps: 0, charsPerSecond: 0, error: null };
window.gpt = gpt;

let gpu, text, trainer, model = null;

function setStatus(s) { gpt.status = s; $('status').textContent = s; }

function fail(message) {
  gpt.error = message;
  setStatus('error');
  $('nogpu').hidden = false;
  $('nogpu').textContent = message;
}

// The trainer takes one call at a time: training chunks, evaluations and
// generation queue here.
const exclusive = oneAtATime();

function drawChart() {
  const maxBits = Math.max(5, ...gpt.losses.map(([, l]) => l));
  drawCurves($('chart'), Math.max(100, gpt.steps), [
    { points: gpt.losses, max: maxBits, color: '#c33', label: `training bits/char (0–${maxBits.toFixed(1)})` },
    { points: gpt.validation, max: maxBits, color: '#36c', label: 'validation bits/char' },
  ]);
}

function showStats() {
  const loss = gpt.losses.at(-1)?.[1], valid = gpt.validation.at(-1)?.[1];
  $('stats').textContent = `step ${gpt.steps}` +
    (loss !== undefined ? ` · loss ${loss.toFixed(2)} bits/char` : '') +
    (valid !== undefined ? ` · validation ${valid.toFixed(2)} bits/char` : '') +
    (gpt.charsPerSecond ? ` · ${gpt.charsPerSecond.toFixed(0)} characters/s` : '');
  drawChart();
}

async function evaluate() {
  gpt.validation.push([trainer.steps, await exclusive(() => trainer.evaluate())]);
}

async function sample() {
  const seed = (Number($('seed').value) + trainer.steps) >>> 0;
  const t = await exclusive(() => trainer.generate('\n', 200, 0.8, 0, seed));
  gpt.samples.push([trainer.steps, t]);
  $('samples').textContent = gpt.samples.slice(-3).map(([s, t]) => `step ${s}:\n${t}`).join('\n\n');
}

async function run(isRunning, maxSteps) {
  maxSteps = Math.min(maxSteps || Infinity, trainer.total_steps);
  setStatus('training');
  let trained = 0, trainedMs = 0;
  while (isRunning() && trainer.steps < maxSteps) {
    const n = Math.min(STEPS_PER_CHUNK, maxSteps - trainer.steps, EVAL_EVERY - trainer.steps % EVAL_EVERY);
    const t0 = performance.now();
    const bits = await exclusive(() => trainer.step(n));
    trainedMs += performance.now() - t0;
    trained += n;
    bits.forEach((b, i) => gpt.losses.push([trainer.steps - n + i + 1, b]));
    gpt.steps = trainer.steps;
    gpt.charsPerSecond = 1000 * trained * trainer.characters_per_step / trainedMs;
    if (gpt.steps % EVAL_EVERY === 0) await evaluate();
    if (gpt.steps % SAMPLE_EVERY === 0) await sample();
    showStats();
    await yieldToBrowser();
  }
  if (gpt.validation.at(-1)?.[0] !== trainer.steps) await evaluate();
  if (gpt.samples.at(-1)?.[0] !== trainer.steps) await sample();
  showStats();
  setStatus(trainer.steps >= maxSteps ? 'done' : 'paused');
}

const training = new TrainingLoop(run, (e) => fail(`training failed: ${e.message ?? e}`));
const start = (maxSteps) => training.start(maxSteps);
const pause = () => training.pause();

function options() {
  const o = { seed: Number($('seed').value) >>> 0 };
  for (const [key, name] of [['context', 'context'], ['width', 'width'], ['heads', 'heads'], ['layers', 'layers'], ['batch', 'batch'], ['total', 'steps'], ['lr', 'lr']]) {
    if (params.has(key)) o[name] = Number(params.get(key));
  }
  return JSON.stringify(o);
}

async function reset() {
  await pause();
  trainer?.free();
  trainer = new GptTrainer(gpu, text, options());
  Object.assign(gpt, { losses: [], validation: [], samples: [], steps: 0, charsPerSecond: 0, parameters: trainer.parameters });
  $('samples').textContent = '';
  showStats();
  setStatus(`ready (${trainer.parameters} parameters)`);
}

async function generateText() {
  const prompt = $('prompt').value, tokens = Number($('tokens').value);
  const temperature = Number($('temperature').value), topK = Number($('topk').value) >>> 0;
  const seed = Number($('seed').value) >>> 0;
  $('generated').textContent = 'generating…';
  const t = model
    ? await model.generate(prompt, tokens, temperature, topK, seed, true)
    : await exclusive(() => trainer.generate(prompt, tokens, temperature, topK, seed));
  gpt.generated = prompt + t;
  $('generated').textContent = gpt.generated;
}

async function loadCheckpoint(file) {
  model?.free();
  model = GptModel.load(gpu, new Uint8Array(await file.arrayBuffer()));
  $('loaded').textContent = `${file.name}: ${model.parameters} parameters; generating from it`;
}

async function save() {
  const bytes = await exclusive(() => trainer.checkpoint());
  const a = document.createElement('a');
  a.href = URL.createObjectURL(new Blob([bytes]));
  a.download = 'gpt.safetensors';
  a.click();
}

async function main() {
  drawChart();
  try {
    gpu = await startGpu(init, Gpu);
  } catch (e) {
    fail(e.message);
    return;
  }
  const info = await describeAdapter(gpu);
  gpt.adapter = info;
  $('adapter').textContent = info.label;
  setStatus('loading the corpus…');
  const r = await fetch('data/kjv.txt');
  if (!r.ok) throw new Error(`data/kjv.txt: HTTP ${r.status}`);
  text = await r.text();
  if (params.has('seed')) $('seed').value = params.get('seed');
  await reset();
  $('start').onclick = () => start(0);
  $('pause').onclick = pause;
  $('reset').onclick = reset;
  $('save').onclick = () => save().catch((e) => fail(`saving failed: ${e.message ?? e}`));
  $('generate').onclick = () => generateText().catch((e) => fail(`generation failed: ${e.message ?? e}`));
  $('checkpoint').onchange = (e) => loadCheckpoint(e.target.files[0]).catch((err) => fail(`${err.message ?? err}`));
  // A checkpoint dropped anywhere on the page loads as the picker's does.
  document.addEventListener('dragover', (e) => e.preventDefault());
  document.addEventListener('drop', (e) => {
    e.preventDefault();
    const file = e.dataTransfer?.files?.[0];
    if (file) loadCheckpoint(file).catch((err) => fail(`${err.message ?? err}`));
  });
  for (const b of ['start', 'pause', 'reset', 'save', 'generate']) $(b).disabled = false;
  if (params.has('steps')) start(Number(params.get('steps')));
}

main().catch((e) => fail(`${e.message ?? e}`));
