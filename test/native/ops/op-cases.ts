/**
 * Single-op models for the simulator's differential tests. Every graph input has the dynamic
 * leading dimension "batch", so each case runs at batch 1 and at the largest gear, like a model.
 */
import { attr, encodeModel, type AttributeValue, type GraphDef, type NodeDef, type TensorData, type ValueInfo } from '../../../scripts/onnx/onnx-model.ts';
import { Prng } from '../../../scripts/onnx/prng.ts';
import { i64, uniform } from '../../../scripts/onnx/tensors.ts';

export interface OpCase {
  /** Unique, readable: `Op/variant`. */
  name: string;
  graph: GraphDef;
  /** Value range of each input's random data (default [-1, 1)); int64 inputs draw integers in [lo, hi). */
  ranges?: Record<string, [number, number]>;
  /** ai.onnx opset (default 17); some ops changed semantics across opsets. */
  opset?: number;
}

/** The case's model bytes (IR version matching the opset, as exporters write it). */
export function encodeCase(c: OpCase): Uint8Array {
  const opset = c.opset ?? 17;
  const irVersion = opset >= 18 ? 9 : opset >= 13 ? 8 : 7;
  return encodeModel({ graph: c.graph, irVersion, opsetImports: [{ domain: '', version: opset }] });
}

/** The operator set the simulator promises (issue 3); every one must appear in some case. */
export const SUPPORTED_OPS = [
  'Gemm', 'MatMul', 'Add', 'Sub', 'Mul', 'Div', 'Relu', 'Sigmoid', 'Tanh', 'Softmax', 'Conv', 'MaxPool',
  'AveragePool', 'GlobalAveragePool', 'BatchNormalization', 'Flatten', 'Reshape', 'Transpose', 'Concat', 'Gather',
  'ReduceMean', 'Identity',
] as const;

export const OP_GEARS = [1, 2, 4];

const B = 'batch';
const rng = new Prng(0x6f7073); // "ops": initializers are fixed, so cases are reproducible
const x = (dims: (number | string)[], name = 'x'): ValueInfo => ({ name, dtype: 'float32', dims: [B, ...dims] });
const y = (dims: (number | string)[], name = 'y'): ValueInfo => ({ name, dtype: 'float32', dims: [B, ...dims] });
const w = (name: string, dims: number[], low = -1, high = 1): TensorData => uniform(rng, name, dims, low, high);

function single(
  name: string,
  opType: string,
  inputs: ValueInfo[],
  initializers: TensorData[],
  output: ValueInfo,
  attributes: Record<string, AttributeValue> = {},
  ranges?: OpCase['ranges'],
): OpCase {
  const node: NodeDef = {
    opType,
    name: opType.toLowerCase(),
    inputs: [...inputs.map((i) => i.name), ...initializers.map((t) => t.name)],
    outputs: [output.name],
    attributes,
  };
  const graph: GraphDef = { name: name.replace(/\W/g, '_'), nodes: [node], inputs, outputs: [output], initializers };
  return ranges === undefined ? { name, graph } : { name, graph, ranges };
}

/** Reorders node inputs: the writer lists graph inputs first, some cases need an initializer first. */
function withNodeInputs(c: OpCase, inputs: string[]): OpCase {
  const [node] = c.graph.nodes as [NodeDef];
  return { ...c, graph: { ...c.graph, nodes: [{ ...node, inputs }] } };
}

function gemmCases(): OpCase[] {
  return [
    single('Gemm/transB-alpha-beta', 'Gemm', [x([6])], [w('W', [4, 6]), w('C', [4])], y([4]), {
      alpha: attr.f(0.7), beta: attr.f(1.3), transB: attr.i(1),
    }),
    single('Gemm/plain-row-bias', 'Gemm', [x([5])], [w('W', [5, 3]), w('C', [1, 3])], y([3])),
    single('Gemm/scalar-bias', 'Gemm', [x([5])], [w('W', [5, 3]), w('C', [1])], y([3]), { beta: attr.f(0.5) }),
    single('Gemm/no-bias', 'Gemm', [x([33])], [w('W', [33, 17])], y([17]), { alpha: attr.f(-1.5) }),
    withNodeInputs(
      single('Gemm/column-bias-input', 'Gemm', [x([8]), { name: 'c', dtype: 'float32', dims: [B, 1] }], [w('W', [8, 3])], y([3])),
      ['x', 'W', 'c'],
    ),
    single('Gemm/large', 'Gemm', [x([96])], [w('W', [80, 96]), w('C', [80])], y([80]), { transB: attr.i(1) }),
    transAGemm('Gemm/transA', false),
    transAGemm('Gemm/transA-transB', true),
  ];
}

/** transA needs A stored [K, M]; M must stay the batch, so a Transpose produces it. */
function transAGemm(name: string, transB: boolean): OpCase {
  const weight = transB ? w('W', [3, 5]) : w('W', [5, 3]);
  return {
    name,
    graph: {
      name: name.replace(/\W/g, '_'),
      nodes: [
        { opType: 'Transpose', inputs: ['x'], outputs: ['xt'], attributes: { perm: attr.ints([1, 0]) } },
        {
          opType: 'Gemm',
          inputs: ['xt', 'W', 'C'],
          outputs: ['y'],
          attributes: { alpha: attr.f(2), beta: attr.f(0.25), transA: attr.i(1), transB: attr.i(transB ? 1 : 0) },
        },
      ],
      inputs: [x([5])],
      outputs: [y([3])],
      initializers: [weight, w('C', [3])],
    },
  };
}

function matMulCases(): OpCase[] {
  return [
    single('MatMul/2d', 'MatMul', [x([6])], [w('W', [6, 5])], y([5])),
    single('MatMul/3d-by-2d', 'MatMul', [x([3, 4])], [w('W', [4, 5])], y([3, 5])),
    single('MatMul/batched-inputs', 'MatMul', [x([3, 4], 'a'), x([4, 2], 'b')], [], y([3, 2])),
    single('MatMul/broadcast-4d', 'MatMul', [x([2, 3, 4])], [w('W', [2, 4, 5])], y([2, 3, 5])),
    single('MatMul/large', 'MatMul', [x([70])], [w('W', [70, 90])], y([90])),
  ];
}

function binaryCases(op: 'Add' | 'Sub' | 'Mul' | 'Div'): OpCase[] {
  // Divisors stay away from zero so relative error stays meaningful.
  const [lo, hi] = op === 'Div' ? [0.5, 2] : [-1, 1];
  const divRange = op === 'Div' ? { b: [lo, hi] as [number, number] } : undefined;
  return [
    single(`${op}/same-shape`, op, [x([3, 4], 'a'), x([3, 4], 'b')], [], y([3, 4]), {}, divRange),
    single(`${op}/trailing-vector`, op, [x([3, 4])], [w('k', [4], lo, hi)], y([3, 4])),
    single(`${op}/column`, op, [x([3, 4])], [w('k', [3, 1], lo, hi)], y([3, 4])),
    single(`${op}/channel-4d`, op, [x([3, 2, 2])], [w('k', [3, 1, 1], lo, hi)], y([3, 2, 2])),
    single(`${op}/scalar`, op, [x([5])], [w('k', [], lo, hi)], y([5])),
    single(`${op}/input-broadcast`, op, [x([3, 4], 'a'), x([1, 4], 'b')], [], y([3, 4]), {}, divRange),
    // The broadcast operand first: non-commutative ops must keep operand order.
    withNodeInputs(
      single(`${op}/broadcast-first`, op, [x([3, 4], 'b')], [w('k', [4], op === 'Div' ? -2 : -1, 1)], y([3, 4]), {},
        op === 'Div' ? { b: [0.5, 2] } : undefined),
      ['k', 'b'],
    ),
  ];
}

function unaryCases(): OpCase[] {
  const r = { x: [-4, 4] as [number, number] };
  return [
    single('Relu/3d', 'Relu', [x([3, 5])], [], y([3, 5]), {}, r),
    single('Sigmoid/3d', 'Sigmoid', [x([3, 5])], [], y([3, 5]), {}, r),
    single('Tanh/3d', 'Tanh', [x([3, 5])], [], y([3, 5]), {}, r),
    single('Identity/3d', 'Identity', [x([3, 4])], [], y([3, 4])),
    single('Softmax/last-axis', 'Softmax', [x([7])], [], y([7]), { axis: attr.i(-1) }, r),
    single('Softmax/default-axis-3d', 'Softmax', [x([3, 4])], [], y([3, 4]), {}, r),
    single('Softmax/axis1-3d', 'Softmax', [x([3, 4])], [], y([3, 4]), { axis: attr.i(1) }, r),
    single('Softmax/large-logits', 'Softmax', [x([10])], [], y([10]), { axis: attr.i(1) }, { x: [-60, 60] }),
  ];
}

function convAttrs(k: [number, number], o: { pads?: number[]; strides?: number[]; dilations?: number[]; group?: number } = {}) {
  const a: Record<string, AttributeValue> = { kernel_shape: attr.ints(k) };
  if (o.pads) a.pads = attr.ints(o.pads);
  if (o.strides) a.strides = attr.ints(o.strides);
  if (o.dilations) a.dilations = attr.ints(o.dilations);
  if (o.group !== undefined) a.group = attr.i(o.group);
  return a;
}

function convCases(): OpCase[] {
  return [
    single('Conv/3x3-pad1-bias', 'Conv', [x([2, 7, 7])], [w('W', [3, 2, 3, 3]), w('B', [3])], y([3, 7, 7]), convAttrs([3, 3], { pads: [1, 1, 1, 1] })),
    single('Conv/stride2-no-bias', 'Conv', [x([3, 9, 9])], [w('W', [4, 3, 3, 3])], y([4, 4, 4]), convAttrs([3, 3], { strides: [2, 2] })),
    single('Conv/dilation2', 'Conv', [x([2, 9, 9])], [w('W', [2, 2, 3, 3]), w('B', [2])], y([2, 9, 9]), convAttrs([3, 3], { pads: [2, 2, 2, 2], dilations: [2, 2] })),
    single('Conv/groups2', 'Conv', [x([4, 6, 6])], [w('W', [6, 2, 3, 3]), w('B', [6])], y([6, 6, 6]), convAttrs([3, 3], { pads: [1, 1, 1, 1], group: 2 })),
    single('Conv/depthwise', 'Conv', [x([4, 6, 6])], [w('W', [4, 1, 3, 3])], y([4, 4, 4]), convAttrs([3, 3], { group: 4 })),
    single('Conv/asym-pads-2x3-stride2x1', 'Conv', [x([2, 7, 8])], [w('W', [3, 2, 2, 3]), w('B', [3])], y([3, 4, 7]), convAttrs([2, 3], { pads: [0, 1, 2, 0], strides: [2, 1] })),
    single('Conv/1x1', 'Conv', [x([8, 5, 5])], [w('W', [5, 8, 1, 1]), w('B', [5])], y([5, 5, 5]), convAttrs([1, 1])),
    single('Conv/dilation-stride-groups', 'Conv', [x([6, 11, 10])], [w('W', [9, 2, 3, 3]), w('B', [9])], y([9, 5, 3]), convAttrs([3, 3], { pads: [1, 0, 1, 0], strides: [2, 2], dilations: [2, 2], group: 3 })),
    single('Conv/large-blocked', 'Conv', [x([16, 12, 12])], [w('W', [32, 16, 3, 3]), w('B', [32])], y([32, 12, 12]), convAttrs([3, 3], { pads: [1, 1, 1, 1] })),
  ];
}

function poolCases(): OpCase[] {
  const k = (n: number) => attr.ints([n, n]);
  return [
    single('MaxPool/2x2-s2', 'MaxPool', [x([3, 8, 8])], [], y([3, 4, 4]), { kernel_shape: k(2), strides: k(2) }),
    single('MaxPool/3x3-s1-pad1', 'MaxPool', [x([2, 5, 5])], [], y([2, 5, 5]), { kernel_shape: k(3), pads: attr.ints([1, 1, 1, 1]) }),
    single('MaxPool/3x3-s2-asym-pads', 'MaxPool', [x([2, 7, 7])], [], y([2, 3, 3]), { kernel_shape: k(3), strides: k(2), pads: attr.ints([0, 0, 1, 1]) }),
    single('AveragePool/2x2-s2', 'AveragePool', [x([3, 8, 8])], [], y([3, 4, 4]), { kernel_shape: k(2), strides: k(2) }),
    single('AveragePool/3x3-pad1-exclude-pad', 'AveragePool', [x([2, 5, 5])], [], y([2, 5, 5]), { kernel_shape: k(3), pads: attr.ints([1, 1, 1, 1]) }),
    single('AveragePool/3x3-pad1-include-pad', 'AveragePool', [x([2, 5, 5])], [], y([2, 5, 5]), { kernel_shape: k(3), pads: attr.ints([1, 1, 1, 1]), count_include_pad: attr.i(1) }),
    single('AveragePool/3x3-s2-asym-pads', 'AveragePool', [x([2, 7, 6])], [], y([2, 3, 3]), { kernel_shape: k(3), strides: k(2), pads: attr.ints([1, 1, 0, 0]) }),
    single('GlobalAveragePool/4x5x6', 'GlobalAveragePool', [x([4, 5, 6])], [], y([4, 1, 1])),
    single('GlobalAveragePool/1x1', 'GlobalAveragePool', [x([3, 1, 1])], [], y([3, 1, 1])),
  ];
}

function batchNormCase(name: string, dims: number[], epsilon?: number): OpCase {
  const c = dims[0] ?? 1;
  const attributes: Record<string, AttributeValue> = epsilon === undefined ? {} : { epsilon: attr.f(epsilon) };
  return single(
    name,
    'BatchNormalization',
    [x(dims)],
    [w('scale', [c], 0.5, 1.5), w('bias', [c]), w('mean', [c], -0.5, 0.5), w('var', [c], 0.01, 2)],
    y(dims),
    attributes,
  );
}

function shapeCases(): OpCase[] {
  return [
    batchNormCase('BatchNormalization/4d', [4, 3, 3]),
    batchNormCase('BatchNormalization/2d-eps1e-3', [5], 1e-3),
    single('Flatten/axis1', 'Flatten', [x([2, 3, 4])], [], { name: 'y', dtype: 'float32', dims: [B, 24] }, { axis: attr.i(1) }),
    single('Flatten/default-axis', 'Flatten', [x([3, 2, 2])], [], { name: 'y', dtype: 'float32', dims: [B, 12] }),
    single('Reshape/keep-batch-infer', 'Reshape', [x([2, 3, 4])], [i64('shape', [2], [0, -1])], y([24])),
    single('Reshape/infer-batch', 'Reshape', [x([24])], [i64('shape', [3], [-1, 4, 6])], y([4, 6])),
    single('Reshape/explicit', 'Reshape', [x([6])], [i64('shape', [3], [0, 2, 3])], y([2, 3])),
    single('Transpose/nchw-to-nhwc', 'Transpose', [x([2, 3, 4])], [], y([3, 4, 2]), { perm: attr.ints([0, 2, 3, 1]) }),
    single('Transpose/swap-last', 'Transpose', [x([3, 4])], [], y([4, 3]), { perm: attr.ints([0, 2, 1]) }),
    single('Concat/axis1', 'Concat', [x([2, 3], 'a'), x([4, 3], 'b')], [], y([6, 3]), { axis: attr.i(1) }),
    single('Concat/three-last-axis', 'Concat', [x([2, 1], 'a'), x([2, 3], 'b'), x([2, 2], 'c')], [], y([2, 6]), { axis: attr.i(-1) }),
    withNodeInputs(
      single('Gather/embedding-axis0', 'Gather', [{ name: 'ids', dtype: 'int64', dims: [B, 6] }], [w('table', [20, 5])], y([6, 5]), { axis: attr.i(0) }, { ids: [0, 20] }),
      ['table', 'ids'],
    ),
    single('Gather/axis1-negative-index', 'Gather', [x([5, 3])], [i64('idx', [4], [4, 0, -1, 2])], y([4, 3]), { axis: attr.i(1) }),
    single('Gather/scalar-index-axis2', 'Gather', [x([5, 3])], [i64('idx', [], [1])], y([5]), { axis: attr.i(2) }),
    single('ReduceMean/axis1-drop', 'ReduceMean', [x([3, 4])], [], y([4]), { axes: attr.ints([1]), keepdims: attr.i(0) }),
    single('ReduceMean/spatial-keep', 'ReduceMean', [x([2, 3, 4])], [], y([2, 1, 1]), { axes: attr.ints([2, 3]) }),
    single('ReduceMean/last-negative', 'ReduceMean', [x([3, 7])], [], y([3, 1]), { axes: attr.ints([-1]), keepdims: attr.i(1) }),
  ];
}

/** The same kind of model with initializers in float_data / int64_data instead of raw_data. */
function typedEncoding(c: OpCase, name: string): OpCase {
  const initializers = c.graph.initializers?.map((t) => ({ ...t, encoding: 'typed' as const }));
  return { ...c, name, graph: { ...c.graph, initializers } };
}

export const OP_CASES: OpCase[] = [
  ...gemmCases(),
  ...matMulCases(),
  ...(['Add', 'Sub', 'Mul', 'Div'] as const).flatMap(binaryCases),
  ...unaryCases(),
  ...convCases(),
  ...poolCases(),
  ...shapeCases(),
  typedEncoding(
    single('Gemm', 'Gemm', [x([6])], [w('W', [4, 6]), w('C', [4])], y([4]), { transB: attr.i(1) }),
    'Gemm/typed-float-data',
  ),
  // Before opset 13 Softmax flattens to 2-D at `axis` (default 1) and normalises over the rest.
  { ...single('Softmax/opset11-axis1-3d', 'Softmax', [x([3, 4])], [], y([3, 4]), {}, { x: [-4, 4] }), opset: 11 },
  { ...single('Softmax/opset11-axis2-4d', 'Softmax', [x([2, 3, 2])], [], y([2, 3, 2]), { axis: attr.i(2) }, { x: [-4, 4] }), opset: 11 },
  // From opset 18 ReduceMean takes its axes as an input.
  { ...single('ReduceMean/opset18-axes-input', 'ReduceMean', [x([3, 4])], [i64('axes', [1], [-1])], y([3]), { keepdims: attr.i(0) }), opset: 18 },
  typedEncoding(single('Reshape', 'Reshape', [x([2, 6])], [i64('shape', [3], [0, 3, -1])], y([3, 4])), 'Reshape/typed-int64-data'),
];

