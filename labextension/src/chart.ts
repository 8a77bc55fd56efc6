/**
 * A run's small bar chart: tokens per step, the sub-calls' in the upper band
 * and the root call's in the lower band, each band on its own scale (a
 * 60,000-token batch next to a 2,000-token root call would flatten the root
 * bars to nothing on one scale), and below them the cost per step when some
 * cost is known. Plain SVG; bar positions are percentages, so it fits any
 * panel width.
 */
import { formatCost, formatTokens } from './format';
import type { IStepPoint } from './panel_model';

const SVG_NS = 'http://www.w3.org/2000/svg';
const TOKEN_HEIGHT = 44;
/** Each band (sub-calls above, root model below) and its own scale. */
const BAND_HEIGHT = TOKEN_HEIGHT / 2;

/** A bar's height in its band: any tokens at all show as at least 1 px. */
function bandHeight(tokens: number, largest: number): number {
  if (tokens <= 0 || largest <= 0) {
    return 0;
  }
  return Math.max(1, (tokens / largest) * (BAND_HEIGHT - 1));
}
const LABEL_HEIGHT = 12;
const COST_HEIGHT = 14;
/** Widest a step's slot gets, in percent, so one step is not one wide block. */
const MAX_SLOT = 12;

function svg<K extends keyof SVGElementTagNameMap>(
  tag: K,
  attributes: Record<string, string | number>
): SVGElementTagNameMap[K] {
  const element = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attributes)) {
    element.setAttribute(name, String(value));
  }
  return element;
}

function percent(value: number): string {
  return `${value.toFixed(3)}%`;
}

/** Called with a step's point when its bar is clicked. */
export type BarClick = (point: IStepPoint) => void;

export function renderChart(points: IStepPoint[], onClick: BarClick): HTMLElement {
  const figure = document.createElement('div');
  figure.className = 'rlm-chart';
  const hasCost = points.some(p => p.costUsd !== null);
  const largestRoot = Math.max(0, ...points.map(p => p.rootTokens));
  const largestSub = Math.max(0, ...points.map(p => p.subcallTokens));
  const maxCost = Math.max(0, ...points.map(p => p.costUsd ?? 0));
  const height = TOKEN_HEIGHT + LABEL_HEIGHT + (hasCost ? COST_HEIGHT : 0);

  const chart = svg('svg', { width: '100%', height, role: 'img' });
  chart.setAttribute(
    'aria-label',
    `Tokens${hasCost ? ' and cost' : ''} per step, ${points.length} step${points.length === 1 ? '' : 's'}`
  );
  chart.appendChild(
    svg('line', {
      class: 'rlm-chart-axis',
      x1: '0%',
      x2: '100%',
      y1: TOKEN_HEIGHT + 0.5,
      y2: TOKEN_HEIGHT + 0.5
    })
  );

  const slot = Math.min(100 / Math.max(1, points.length), MAX_SLOT);
  // Label every step while they fit, else every k-th.
  const labelEvery = Math.max(1, Math.ceil(points.length / 16));
  points.forEach((point, i) => {
    const x = i * slot + slot * 0.15;
    const width = slot * 0.7;
    const tokens = point.rootTokens + point.subcallTokens;
    const group = svg('g', {
      class: 'rlm-chart-bar',
      'data-step': point.step,
      'data-tokens': tokens,
      'data-cost': point.costUsd === null ? '' : point.costUsd
    });
    const title = svg('title', {});
    title.textContent =
      `Step ${point.step}: ${formatTokens(tokens)} ` +
      `(root model ${formatTokens(point.rootTokens)}, ` +
      `sub-calls ${formatTokens(point.subcallTokens)})` +
      `, ${formatCost(point.costUsd)}`;
    group.appendChild(title);
    // A full-height hit area, so short bars are easy to click.
    group.appendChild(
      svg('rect', { class: 'rlm-chart-hit', x: percent(i * slot), y: 0, width: percent(slot), height })
    );
    const rootHeight = bandHeight(point.rootTokens, largestRoot);
    const subHeight = bandHeight(point.subcallTokens, largestSub);
    group.appendChild(
      svg('rect', {
        class: 'rlm-chart-root',
        x: percent(x),
        y: TOKEN_HEIGHT - rootHeight,
        width: percent(width),
        height: rootHeight
      })
    );
    if (subHeight > 0) {
      group.appendChild(
        svg('rect', {
          class: 'rlm-chart-sub',
          x: percent(x),
          y: BAND_HEIGHT - subHeight,
          width: percent(width),
          height: subHeight
        })
      );
    }
    if (i % labelEvery === 0) {
      const label = svg('text', {
        class: 'rlm-chart-label',
        x: percent(i * slot + slot / 2),
        y: TOKEN_HEIGHT + LABEL_HEIGHT - 2,
        'text-anchor': 'middle'
      });
      label.textContent = String(point.step);
      group.appendChild(label);
    }
    if (hasCost && point.costUsd !== null && maxCost > 0) {
      const costHeight = (point.costUsd / maxCost) * (COST_HEIGHT - 3);
      group.appendChild(
        svg('rect', {
          class: 'rlm-chart-cost',
          x: percent(x),
          y: TOKEN_HEIGHT + LABEL_HEIGHT + 2,
          width: percent(width),
          height: Math.max(1, costHeight)
        })
      );
    }
    group.addEventListener('click', () => onClick(point));
    chart.appendChild(group);
  });
  figure.appendChild(chart);

  const legend = document.createElement('div');
  legend.className = 'rlm-chart-legend';
  const total = points.reduce((sum, p) => sum + p.rootTokens + p.subcallTokens, 0);
  const items: Array<[string, string]> = [
    ['rlm-swatch-root', 'root model'],
    ['rlm-swatch-sub', 'sub-calls']
  ];
  if (hasCost) {
    items.push(['rlm-swatch-cost', 'cost (below)']);
  }
  for (const [swatch, text] of items) {
    const item = document.createElement('span');
    const mark = document.createElement('i');
    mark.className = `rlm-swatch ${swatch}`;
    item.append(mark, text);
    legend.appendChild(item);
  }
  const scale = document.createElement('span');
  scale.className = 'rlm-chart-scale';
  scale.textContent =
    `each band to its own scale: sub-calls up to ${formatTokens(largestSub)}, ` +
    `root model up to ${formatTokens(largestRoot)} per step · ${formatTokens(total)} in all`;
  legend.appendChild(scale);
  figure.appendChild(legend);
  return figure;
}
