// The seat map of one section on a canvas, drawn from GetSeatMap's compact
// form: rows (first seat id, first seat number, seat count) and a bitmap of
// availability, one bit per seat in row order, least significant bit first.
// One draw per animation frame whatever the number of seats; a click or a
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
    this.redraw();
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
    this.redraw();
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

  redraw() {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.paint();
    });
  }

  paint() {
    const ctx = this.canvas.getContext('2d');
    const c = this.cell;
    ctx.setTransform(this.ratio, 0, 0, this.ratio, 0, 0);
    ctx.clearRect(0, 0, this.canvas.width, this.canvas.height);
    ctx.font = `${Math.min(14, Math.max(9, c - 6))}px system-ui, sans-serif`;
    ctx.textBaseline = 'middle';
    ctx.textAlign = 'end';
    ctx.fillStyle = '#1b1f24';
    const left = LABEL_WIDTH + PAD;
    const free = new Path2D();
    const taken = new Path2D();
    const hatch = new Path2D();
    const picked = new Path2D();
    const mark = new Path2D();
    const r = Math.max(2, c / 2 - 2);
    this.rows.forEach((row, ri) => {
      const y = PAD + ri * c;
      if (c >= 10 || ri % 5 === 0) ctx.fillText(row.label, LABEL_WIDTH - 4, y + c / 2);
      for (let i = 0; i < row.count; i++) {
        const x = left + i * c;
        const id = row.firstId + i;
        if (this.picked.has(id)) {
          picked.rect(x + 1, y + 1, c - 2, c - 2);
          if (c >= 12) {
            mark.moveTo(x + c * 0.28, y + c * 0.52);
            mark.lineTo(x + c * 0.45, y + c * 0.7);
            mark.lineTo(x + c * 0.74, y + c * 0.32);
          }
        } else if (this.free[row.offset + i] === 1 && !this.taken.has(id)) {
          free.moveTo(x + c / 2 + r, y + c / 2);
          free.arc(x + c / 2, y + c / 2, r, 0, Math.PI * 2);
        } else {
          taken.rect(x + 2, y + 2, c - 4, c - 4);
          hatch.moveTo(x + 2, y + c - 2);
          hatch.lineTo(x + c - 2, y + 2);
          if (c >= 12) {
            hatch.moveTo(x + 2, y + 2);
            hatch.lineTo(x + c - 2, y + c - 2);
          }
        }
      }
    });
    ctx.lineWidth = 1.5;
    ctx.fillStyle = '#e3f4e8';
    ctx.fill(free);
    ctx.strokeStyle = '#1e7a3c';
    ctx.stroke(free);
    ctx.fillStyle = '#d5dbe1';
    ctx.fill(taken);
    ctx.strokeStyle = '#5f6a74';
    ctx.stroke(taken);
    ctx.stroke(hatch);
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
