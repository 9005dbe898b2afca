"""Test kernels, one source per kernel language; every backend runs the same tests with them.

Argument order is the same everywhere: buffers first (GLSL: bindings 0, 1, ...),
then scalars (GLSL: push-constant members in order).
"""

SCALE_ADD = {  # y[i] += a * x[i] for i < n
    "python": '''
def scale_add(y: "float*", x: "float*", a: "float", n: "int"):
    y[:n] += np.float32(a) * x[:n]
''',
    "opencl-c": '''
__kernel void scale_add(__global float* y, __global const float* x, float a, int n) {
    int i = get_global_id(0);
    if (i < n) y[i] += a * x[i];
}
''',
    "cuda-c": '''
extern "C" __global__ void scale_add(float* y, const float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += a * x[i];
}
''',
    "glsl": '''
#version 450
#pragma kernel scale_add
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) buffer Y { float y[]; };
layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(push_constant) uniform P { float a; int n; } p;
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < uint(p.n)) y[i] += p.a * x[i];
}
''',
}

INCREMENT = {  # v[i] += 1 for i < n (int32)
    "python": '''
def increment(v: "int*", n: "int"):
    v[:n] += 1
''',
    "opencl-c": '''
__kernel void increment(__global int* v, int n) {
    int i = get_global_id(0);
    if (i < n) v[i] += 1;
}
''',
    "cuda-c": '''
extern "C" __global__ void increment(int* v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) v[i] += 1;
}
''',
    "glsl": '''
#version 450
#pragma kernel increment
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) buffer V { int v[]; };
layout(push_constant) uniform P { int n; } p;
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < uint(p.n)) v[i] += 1;
}
''',
}

BROKEN = {  # does not compile; the error must carry the compiler's log
    "python": "def broken(x:\n    return x +\n",
    "opencl-c": "__kernel void broken(__global float* x) { x[0] = undeclared_name; }",
    "cuda-c": 'extern "C" __global__ void broken(float* x) { x[0] = undeclared_name; }',
    "glsl": "#version 450\nlayout(local_size_x = 1) in;\nvoid main() { undeclared_name = 1; }\n",
}

SPIN = {  # waits for x[0] to become nonzero, which nothing does: a kernel that never ends (then x[1] = n)
    "python": '''
def spin(x: "int*", n: "int"):
    while x[0] == 0:
        pass
    x[1] = n
''',
    "opencl-c": '''
__kernel void spin(__global volatile int* x, int n) {
    while (x[0] == 0) {}
    x[1] = n;
}
''',
    "cuda-c": '''
extern "C" __global__ void spin(volatile int* x, int n) {
    while (x[0] == 0) {}
    x[1] = n;
}
''',
    # Mesa's lavapipe ends a loop after 65535 iterations: launched over SPIN_GRID it still runs for days
    "glsl": '''
#version 450
#pragma kernel spin
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) volatile buffer X { int x[]; };
layout(push_constant) uniform P { int n; } p;
void main() {
    while (atomicAdd(x[0], 0) == 0) { atomicAdd(x[2], 1); }
    x[1] = p.n;
}
''',
}

#: (global_size, local_size) to launch SPIN with, by kernel language (default: one work item)
SPIN_GRID = {"glsl": ((64 * 65535, 1000), (64, 1))}

#: a word the compiler log must mention for BROKEN
BROKEN_MARK = {"python": "SyntaxError", "opencl-c": "undeclared_name", "cuda-c": "undeclared_name",
               "glsl": "undeclared_name"}


FLIP = {  # v[i] = 1 - v[i] for i < n (bytes: a bool buffer takes it)
    "python": '''
def flip(v: "uchar*", n: "int"):
    v[:n] = 1 - v[:n]
''',
    "opencl-c": '''
__kernel void flip(__global uchar* v, int n) {
    int i = get_global_id(0);
    if (i < n) v[i] = 1 - v[i];
}
''',
    "cuda-c": '''
extern "C" __global__ void flip(unsigned char* v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) v[i] = 1 - v[i];
}
''',
    "glsl": '''
#version 450
#extension GL_EXT_shader_8bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require
#pragma kernel flip
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) buffer V { uint8_t v[]; };
layout(push_constant) uniform P { int n; } p;
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < uint(p.n)) v[i] = uint8_t(1) - v[i];
}
''',
}


def source(table: dict, device) -> str:
    """The source of a test kernel in the device's kernel language."""
    lang = device.info.kernel_language
    if lang not in table:
        raise LookupError(f"no test kernel in {lang}")
    return table[lang]
