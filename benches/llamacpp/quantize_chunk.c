// Quantizes f32 rows with ggml's own reference quantizer
// (ggml_quantize_chunk, no importance matrix), for the byte fixtures that
// pin kgen's quantizers to ggml's (scripts/ggml-quant-fixtures.sh).
//
// Usage: quantize_chunk IN.f32 OUT ROWS K TYPE_ID
#include <stdio.h>
#include <stdlib.h>

#include "ggml.h"

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: %s IN.f32 OUT ROWS K TYPE_ID\n", argv[0]);
        return 2;
    }
    const long rows = atol(argv[3]), k = atol(argv[4]);
    const enum ggml_type t = (enum ggml_type) atoi(argv[5]);
    float *x = malloc(sizeof(float) * rows * k);
    FILE *f = fopen(argv[1], "rb");
    if (!x || !f || fread(x, sizeof(float), rows * k, f) != (size_t) (rows * k)) {
        fprintf(stderr, "%s: cannot read %ld x %ld f32 values\n", argv[1], rows, k);
        return 1;
    }
    fclose(f);
    const size_t row_size = ggml_row_size(t, k);
    void *out = malloc(row_size * rows);
    ggml_quantize_init(t);
    const size_t n = ggml_quantize_chunk(t, x, out, 0, rows, k, NULL);
    FILE *o = fopen(argv[2], "wb");
    if (!out || !o || fwrite(out, 1, n, o) != n) {
        fprintf(stderr, "%s: cannot write\n", argv[2]);
        return 1;
    }
    fclose(o);
    return 0;
}
