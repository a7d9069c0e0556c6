// The MNIST demo page: trains through kiln's wasm API, yielding to the
// event loop between chunks of steps so the tab stays responsive.
import init, { Gpu, Dataset, Trainer } from './pkg/kiln_web.js';
import { describeAdapter, startGpu } from './adapter.js';
import { TrainingLoop, drawCurves, oneAtATime, yieldToBrowser } from './training.js';

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
// Steps per call into wasm (one loss readback each); ?chunk=1 gives every step's loss.
const STEPS_PER_CHUNK = Number(params.get('chunk') ?? 5);
const EVAL_EVERY = 50;

// State the page (and the end-to-end test) reads: window.demo.
const demo = {
  status: 'loading', losses: [], accuracies: [], steps: 0, stepsPerSecond: 0, prediction: null, error: null,
  quantized: null,
};
window.demo = demo;

let gpu, data, trainer;

function setStatus(s) { demo.status = s; $('status').textContent = s; }

function fail(message) {
  demo.error = message;
  setStatus('error');
  $('nogpu').hidden = false;
  $('nogpu').textContent = message;
}

async function fetchBytes(name) {
  const r = await fetch(`data/${name}`);
  if (!r.ok) throw new Error(`data/${name}: HTTP ${r.status}`);
  return new Uint8Array(await r.arrayBuffer());
}

function drawChart() {
  const maxLoss = Math.max(2.5, ...demo.losses.map(([, l]) => l));
  drawCurves($('chart'), Math.max(100, demo.steps), [
    { points: demo.losses, max: maxLoss, color: '#c33', label: `loss (0–${maxLoss.toFixed(1)})` },
    { points: demo.accuracies, max: 1, color: '#36c', label: 'test accuracy (0–1)' },
  ]);
}

function showStats() {
  const loss = demo.losses.at(-1)?.[1], acc = demo.accuracies.at(-1)?.[1];
  $('stats').textContent = `step ${demo.steps}` +
    (loss !== undefined ? ` · loss ${loss.toFixed(4)}` : '') +
    (acc !== undefined ? ` · test accuracy ${(100 * acc).toFixed(1)}%` : '') +
    (demo.stepsPerSecond ? ` · ${demo.stepsPerSecond.toFixed(1)} steps/s` : '');
  drawChart();
}

// The trainer takes one call at a time: training chunks and predictions
// from the pad queue here.
const exclusive = oneAtATime();

async function evaluate() {
  demo.accuracies.push([trainer.steps, await exclusive(() => trainer.evaluate())]);
}

// The current weights quantized to int8 and int4: their test accuracies.
async function quantizedAccuracy() {
  const int8 = await exclusive(() => trainer.evaluate_quantized(8));
  const int4 = await exclusive(() => trainer.evaluate_quantized(4));
  demo.quantized = { int8, int4 };
  $('quantized').textContent = `int8 ${(100 * int8).toFixed(1)}% · int4 ${(100 * int4).toFixed(1)}%`;
}

async function run(isRunning, maxSteps) {
  // The run's schedule ends after its epochs (kiln-mnist's default config).
  maxSteps = Math.min(maxSteps || Infinity, trainer.total_steps);
  setStatus('training');
  let trainedSteps = 0, trainedMs = 0;
  while (isRunning() && trainer.steps < maxSteps) {
    const n = Math.min(STEPS_PER_CHUNK, maxSteps - trainer.steps);
    const t0 = performance.now();
    const loss = await exclusive(() => trainer.step(n));
    trainedMs += performance.now() - t0;
    trainedSteps += n;
    demo.steps = trainer.steps;
    demo.stepsPerSecond = 1000 * trainedSteps / trainedMs;
    demo.losses.push([demo.steps, loss]);
    if (demo.steps % EVAL_EVERY === 0) await evaluate();
    showStats();
    await yieldToBrowser();
  }
  if (demo.accuracies.at(-1)?.[0] !== trainer.steps) await evaluate();
  demo.matmulChoices = JSON.parse(gpu.matmul_choices());
  showStats();
  setStatus(trainer.steps >= maxSteps ? 'done' : 'paused');
}

const training = new TrainingLoop(run, (e) => fail(`training failed: ${e.message ?? e}`));
const start = (maxSteps) => training.start(maxSteps);
const pause = () => training.pause();

async function reset() {
  await pause();
  const seed = Number($('seed').value) >>> 0;
  trainer?.free();
  trainer = new Trainer(gpu, data, seed);
  Object.assign(demo, { losses: [], accuracies: [], steps: 0, stepsPerSecond: 0, seed });
  showStats();
  setStatus('ready');
}

// The drawing pad: strokes on a 280×280 canvas, read back as 28×28 pixels.
function setupPad() {
  const pad = $('pad'), g = pad.getContext('2d');
  g.lineWidth = 20; g.lineCap = 'round'; g.strokeStyle = '#fff';
  let drawing = false;
  const at = (e) => { const r = pad.getBoundingClientRect(); return [e.clientX - r.left, e.clientY - r.top]; };
  pad.addEventListener('pointerdown', (e) => { drawing = true; g.beginPath(); g.moveTo(...at(e)); });
  pad.addEventListener('pointermove', (e) => { if (drawing) { g.lineTo(...at(e)); g.stroke(); } });
  const end = () => { if (drawing) { drawing = false; predict().catch((e) => fail(`prediction failed: ${e.message ?? e}`)); } };
  pad.addEventListener('pointerup', end);
  pad.addEventListener('pointerleave', end);
  $('clear').onclick = () => { g.clearRect(0, 0, pad.width, pad.height); $('prediction').textContent = '–'; $('probs').innerHTML = ''; };
}

// Downsample the pad like MNIST: the ink's bounding box scaled to 20×20,
// centred in 28×28.
function padPixels() {
  const pad = $('pad'), src = pad.getContext('2d').getImageData(0, 0, pad.width, pad.height);
  let x0 = pad.width, y0 = pad.height, x1 = -1, y1 = -1;
  for (let y = 0; y < pad.height; y++) for (let x = 0; x < pad.width; x++) {
    if (src.data[4 * (y * pad.width + x)] > 0) { x0 = Math.min(x0, x); x1 = Math.max(x1, x); y0 = Math.min(y0, y); y1 = Math.max(y1, y); }
  }
  if (x1 < 0) return null;
  const side = Math.max(x1 - x0, y1 - y0) + 1;
  const small = document.createElement('canvas'); small.width = small.height = 28;
  const s = small.getContext('2d');
  s.fillStyle = '#000'; s.fillRect(0, 0, 28, 28);
  s.drawImage(pad, x0 + (x1 - x0 + 1 - side) / 2, y0 + (y1 - y0 + 1 - side) / 2, side, side, 4, 4, 20, 20);
  const img = s.getImageData(0, 0, 28, 28).data;
  return Float32Array.from({ length: 784 }, (_, i) => img[4 * i] / 255);
}

async function predict() {
  const pixels = padPixels();
  if (!pixels || !trainer) return;
  const probs = Array.from(await exclusive(() => trainer.predict(pixels)));
  const best = probs.indexOf(Math.max(...probs));
  demo.prediction = { digit: best, probs };
  $('prediction').textContent = String(best);
  $('probs').innerHTML = probs.map((p, d) =>
    `<tr><td>${d}</td><td><div class="bar" style="width:${(150 * p).toFixed(0)}px"></div></td><td>${(100 * p).toFixed(1)}%</td></tr>`).join('');
}

async function main() {
  drawChart();
  setupPad();
  try {
    gpu = await startGpu(init, Gpu);
  } catch (e) {
    fail(e.message);
    return;
  }
  // ?tune=1 or 0 overrides kiln's default (tune GPUs, not CPU adapters).
  if (params.has('tune')) gpu.set_matmul_tuning(params.get('tune') === '1');
  const info = await describeAdapter(gpu);
  demo.adapter = info;
  $('adapter').textContent = info.label;
  $('limits').textContent = JSON.stringify(info, null, 1);
  setStatus('loading MNIST…');
  const files = ['train-images-idx3-ubyte.gz', 'train-labels-idx1-ubyte.gz', 'test-images-idx3-ubyte.gz', 'test-labels-idx1-ubyte.gz'];
  data = new Dataset(...(await Promise.all(files.map(fetchBytes))));
  if (params.has('seed')) $('seed').value = params.get('seed');
  await reset();
  $('start').onclick = () => start(0);
  $('pause').onclick = pause;
  $('reset').onclick = reset;
  $('quantize').onclick = () => quantizedAccuracy().catch((e) => fail(`quantizing failed: ${e.message ?? e}`));
  for (const b of ['start', 'pause', 'reset', 'quantize']) $(b).disabled = false;
  if (params.has('steps')) start(Number(params.get('steps')));
}

main().catch((e) => fail(`${e.message ?? e}`));
