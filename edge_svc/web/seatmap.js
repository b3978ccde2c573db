// The seat map of one section on a canvas, drawn from GetSeatMap's compact
// form: rows (first seat id, first seat number, seat count) and a bitmap of
// availability, one bit per seat in row order, least significant bit first.
// At most one draw per animation frame, which copies a base layer of every
// seat (redrawn only when availability changes) and adds the fan's choice; a click or a
// key finds its seat by arithmetic (no element per seat). Shape as well as
// colour says what a seat is: an open circle is free, a hatched grey square
// is taken, a filled blue square with a white mark is the fan's choice.

const LABEL_WIDTH = 40;
const PAD = 8;

export function decodeBitmap(base64) {
  const raw = atob(base64 || '');
  const bytes = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
  return bytes;
}

export class SeatMap {
  constructor(canvas, { describe, onChange, max = 4 }) {
    this.canvas = canvas;
    this.describe = describe;
    this.onChange = onChange;
    this.max = max;
    this.rows = [];
    this.free = new Uint8Array(0);
    this.taken = new Set();
    this.picked = new Map(); // seat id -> {row, index}
    this.focus = { row: 0, index: 0 };
    this.cell = 20;
    this.frame = 0;
    canvas.addEventListener('click', (e) => this.click(e));
    canvas.addEventListener('keydown', (e) => this.key(e));
    canvas.addEventListener('focus', () => {
      this.redraw();
      this.announce();
    });
    canvas.addEventListener('blur', () => this.redraw());
    this.resize = () => {
      this.layout();
      this.redraw();
    };
    window.addEventListener('resize', this.resize);
    canvas.parentElement?.addEventListener('scroll', () => this.redraw(), { passive: true });
  }

  // Shows one section: {rows: [...], availableBitmap}.
  show(section) {
    let offset = 0;
    this.rows = (section.rows || []).map((r) => {
      const row = {
        label: r.rowLabel,
        firstId: Number(r.firstSeatId),
        firstNumber: Number(r.firstSeatNumber),
        count: Number(r.seatCount),
        offset,
      };
      offset += row.count;
      return row;
    });
    const bits = decodeBitmap(section.availableBitmap);
    this.free = new Uint8Array(offset);
    for (let i = 0; i < offset; i++) this.free[i] = (bits[i >>> 3] >>> (i & 7)) & 1;
    for (const [id] of this.picked) if (!this.isFree(this.locate(id))) this.picked.delete(id);
    const f = this.focus;
    if (!(f.row < this.rows.length && f.index < this.rows[f.row].count)) this.focus = { row: 0, index: 0 };
    this.layout();
    this.redraw(true);
    this.onChange();
  }

  layout() {
    const widest = Math.max(1, ...this.rows.map((r) => r.count));
    const room = (this.canvas.parentElement?.clientWidth || 600) - LABEL_WIDTH - 2 * PAD;
    this.cell = Math.max(8, Math.min(28, Math.floor(room / widest)));
    const width = LABEL_WIDTH + widest * this.cell + 2 * PAD;
    const height = Math.max(1, this.rows.length) * this.cell + 2 * PAD;
    const ratio = window.devicePixelRatio || 1;
    this.canvas.style.width = `${width}px`;
    this.canvas.style.height = `${height}px`;
    this.canvas.width = Math.round(width * ratio);
    this.canvas.height = Math.round(height * ratio);
    this.ratio = ratio;
    this.baseDirty = true;
  }

  locate(id) {
    for (let r = 0; r < this.rows.length; r++) {
      const row = this.rows[r];
      if (id >= row.firstId && id < row.firstId + row.count) return { row: r, index: id - row.firstId };
    }
    return null;
  }

  seatAt(place) {
    const row = this.rows[place.row];
    return {
      id: row.firstId + place.index,
      label: `${row.label}${row.firstNumber + place.index}`,
      row: row.label,
      number: row.firstNumber + place.index,
    };
  }

  isFree(place) {
    if (!place) return false;
    const row = this.rows[place.row];
    const id = row.firstId + place.index;
    return this.free[row.offset + place.index] === 1 && !this.taken.has(id);
  }

  // Seats another fan took since the map was read.
  markTaken(ids) {
    const labels = [];
    for (const raw of ids) {
      const id = Number(raw);
      this.taken.add(id);
      this.picked.delete(id);
      const place = this.locate(id);
      if (place) labels.push(this.seatAt(place).label);
    }
    this.redraw(true);
    this.onChange();
    return labels;
  }

  selected() {
    return [...this.picked.keys()].map((id) => this.seatAt(this.locate(id)));
  }

  clear() {
    this.picked.clear();
    this.redraw();
    this.onChange();
  }

  toggle(place) {
    const seat = this.seatAt(place);
    if (this.picked.has(seat.id)) {
      this.picked.delete(seat.id);
    } else if (!this.isFree(place)) {
      this.announce('taken');
      return;
    } else if (this.picked.size >= this.max) {
      this.announce('full');
      return;
    } else {
      this.picked.set(seat.id, place);
    }
    this.redraw();
    this.onChange();
    this.announce();
  }

  click(event) {
    const box = this.canvas.getBoundingClientRect();
    const x = event.clientX - box.left - LABEL_WIDTH - PAD;
    const y = event.clientY - box.top - PAD;
    const row = Math.floor(y / this.cell);
    const index = Math.floor(x / this.cell);
    if (row < 0 || row >= this.rows.length || index < 0 || index >= this.rows[row].count) return;
    this.focus = { row, index };
    this.toggle(this.focus);
  }

  key(event) {
    if (!this.rows.length) return;
    const f = this.focus;
    let { row, index } = f;
    switch (event.key) {
      case 'ArrowRight': index++; break;
      case 'ArrowLeft': index--; break;
      case 'ArrowDown': row++; break;
      case 'ArrowUp': row--; break;
      case 'Home': index = 0; break;
      case 'End': index = this.rows[row].count - 1; break;
      case 'PageDown': row += 10; break;
      case 'PageUp': row -= 10; break;
      case 'Enter':
      case ' ':
        event.preventDefault();
        this.toggle(f);
        return;
      default:
        return;
    }
    event.preventDefault();
    row = Math.max(0, Math.min(this.rows.length - 1, row));
    index = Math.max(0, Math.min(this.rows[row].count - 1, index));
    this.focus = { row, index };
    this.scrollTo(this.focus);
    this.redraw();
    this.announce();
  }

  scrollTo(place) {
    const scroller = this.canvas.parentElement;
    if (!scroller) return;
    const x = LABEL_WIDTH + PAD + place.index * this.cell;
    const y = PAD + place.row * this.cell;
    if (x < scroller.scrollLeft + LABEL_WIDTH) scroller.scrollLeft = Math.max(0, x - LABEL_WIDTH - PAD);
    else if (x + this.cell > scroller.scrollLeft + scroller.clientWidth) scroller.scrollLeft = x + this.cell - scroller.clientWidth + PAD;
    if (y < scroller.scrollTop) scroller.scrollTop = y - PAD;
    else if (y + this.cell > scroller.scrollTop + scroller.clientHeight) scroller.scrollTop = y + this.cell - scroller.clientHeight + PAD;
  }

  announce(problem) {
    if (!this.rows.length) return;
    const seat = this.seatAt(this.focus);
    const state = this.picked.has(seat.id) ? 'picked' : this.isFree(this.focus) ? 'free' : 'taken';
    this.describe(seat, state, problem);
  }

  redraw(base = false) {
    if (base) this.baseDirty = true;
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.paint();
    });
  }

  // One small picture per seat state, stamped once per seat on the base
  // layer; the base is redrawn only when availability or the size changes.
  sprite(kind) {
    const c = this.cell;
    const px = Math.ceil(c * this.ratio);
    const sprite = document.createElement('canvas');
    sprite.width = px;
    sprite.height = px;
    const ctx = sprite.getContext('2d');
    ctx.scale(this.ratio, this.ratio);
    ctx.lineWidth = 1.5;
    if (kind === 'free') {
      ctx.beginPath();
      ctx.arc(c / 2, c / 2, Math.max(2, c / 2 - 2), 0, Math.PI * 2);
      ctx.fillStyle = '#e3f4e8';
      ctx.fill();
      ctx.strokeStyle = '#1e7a3c';
      ctx.stroke();
    } else {
      ctx.fillStyle = '#d5dbe1';
      ctx.fillRect(2, 2, c - 4, c - 4);
      ctx.strokeStyle = '#5f6a74';
      ctx.strokeRect(2, 2, c - 4, c - 4);
      ctx.beginPath();
      ctx.moveTo(2, c - 2);
      ctx.lineTo(c - 2, 2);
      if (c >= 12) {
        ctx.moveTo(2, 2);
        ctx.lineTo(c - 2, c - 2);
      }
      ctx.stroke();
    }
    return sprite;
  }

  paintBase() {
    if (!this.base) this.base = document.createElement('canvas');
    const base = this.base;
    base.width = this.canvas.width;
    base.height = this.canvas.height;
    const ctx = base.getContext('2d');
    const c = this.cell;
    const ratio = this.ratio;
    const free = this.sprite('free');
    const taken = this.sprite('taken');
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.font = `${Math.min(14, Math.max(9, c - 6))}px system-ui, sans-serif`;
    ctx.textBaseline = 'middle';
    ctx.textAlign = 'end';
    ctx.fillStyle = '#1b1f24';
    this.rows.forEach((row, ri) => {
      if (c >= 10 || ri % 5 === 0) ctx.fillText(row.label, LABEL_WIDTH - 4, PAD + ri * c + c / 2);
    });
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    const left = LABEL_WIDTH + PAD;
    this.rows.forEach((row, ri) => {
      const y = Math.round((PAD + ri * c) * ratio);
      for (let i = 0; i < row.count; i++) {
        const open = this.free[row.offset + i] === 1 && !this.taken.has(row.firstId + i);
        ctx.drawImage(open ? free : taken, Math.round((left + i * c) * ratio), y);
      }
    });
    this.baseDirty = false;
  }

  paint() {
    if (this.baseDirty || !this.base) this.paintBase();
    const ctx = this.canvas.getContext('2d');
    const c = this.cell;
    // Only the part of the canvas the scroller shows is copied.
    const scroller = this.canvas.parentElement;
    const r = this.ratio;
    const sx = Math.max(0, Math.floor((scroller ? scroller.scrollLeft : 0) * r));
    const sy = Math.max(0, Math.floor((scroller ? scroller.scrollTop : 0) * r));
    const sw = Math.min(this.canvas.width - sx, Math.ceil((scroller ? scroller.clientWidth : this.canvas.width) * r) + 2);
    const sh = Math.min(this.canvas.height - sy, Math.ceil((scroller ? scroller.clientHeight : this.canvas.height) * r) + 2);
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    if (sw > 0 && sh > 0) {
      ctx.clearRect(sx, sy, sw, sh);
      ctx.drawImage(this.base, sx, sy, sw, sh, sx, sy, sw, sh);
    }
    ctx.setTransform(r, 0, 0, r, 0, 0);
    const left = LABEL_WIDTH + PAD;
    const picked = new Path2D();
    const mark = new Path2D();
    for (const [, place] of this.picked) {
      const x = left + place.index * c;
      const y = PAD + place.row * c;
      picked.rect(x + 1, y + 1, c - 2, c - 2);
      if (c >= 12) {
        mark.moveTo(x + c * 0.28, y + c * 0.52);
        mark.lineTo(x + c * 0.45, y + c * 0.7);
        mark.lineTo(x + c * 0.74, y + c * 0.32);
      }
    }
    ctx.fillStyle = '#0b5cad';
    ctx.fill(picked);
    ctx.strokeStyle = '#ffffff';
    ctx.lineWidth = Math.max(1.5, c / 8);
    ctx.stroke(mark);
    if (document.activeElement === this.canvas && this.rows.length) {
      const x = left + this.focus.index * c;
      const y = PAD + this.focus.row * c;
      ctx.lineWidth = 3;
      ctx.strokeStyle = '#1b1f24';
      ctx.strokeRect(x - 1.5, y - 1.5, c + 3, c + 3);
      ctx.lineWidth = 2;
      ctx.strokeStyle = '#ffbf47';
      ctx.strokeRect(x - 3.5, y - 3.5, c + 7, c + 7);
    }
  }
}
