// What the demo pages share: calls into one wasm object one at a time, a
// training loop that starts and pauses, and curves on a canvas.

export const yieldToBrowser = () => new Promise((r) => setTimeout(r, 0));

// A queue for calls into one wasm object (a trainer takes one call at a
// time): each call waits for the previous one.
export function oneAtATime() {
  let queue = Promise.resolve();
  return (f) => {
    const p = queue.then(f);
    queue = p.catch(() => {});
    return p;
  };
}

// `body(isRunning, ...args)` as a loop that start() runs unless it is
// running, and pause() asks to stop and waits for.
export class TrainingLoop {
  constructor(body, onError) {
    this.body = body;
    this.onError = onError;
    this.running = false;
    this.done = Promise.resolve();
  }

  start(...args) {
    if (this.running) return;
    this.running = true;
    this.done = this.body(() => this.running, ...args).catch(this.onError).finally(() => { this.running = false; });
  }

  async pause() {
    this.running = false;
    await this.done;
  }
}

// Curves over steps 0..maxStep, each `{ points: [[step, value]], max, color, label }`
// scaled from 0 to its own max.
export function drawCurves(canvas, maxStep, curves) {
  const g = canvas.getContext('2d'), w = canvas.width, h = canvas.height, pad = 30;
  g.clearRect(0, 0, w, h);
  g.strokeStyle = '#ccc'; g.strokeRect(pad, 5, w - pad - 5, h - pad - 5);
  g.fillStyle = '#555'; g.font = '11px sans-serif';
  g.fillText('steps', w / 2, h - 8);
  const x = (s) => pad + (w - pad - 5) * s / maxStep;
  const y = (v, max) => 5 + (h - pad - 5) * (1 - Math.min(v / max, 1));
  curves.forEach(({ points, max, color, label }, k) => {
    g.strokeStyle = color; g.beginPath();
    points.forEach(([s, v], i) => (i ? g.lineTo(x(s), y(v, max)) : g.moveTo(x(s), y(v, max))));
    g.stroke();
    g.fillStyle = color; g.fillText(label, pad + 5, 18 + 14 * k);
  });
  g.fillStyle = '#555'; g.fillText(String(maxStep), w - 30, h - 18);
}
