/* qmap_errors.h — the status codes of libqmap, as zstd_errors.h is to zstd.
 *
 * Every fallible qmap function returns one of these. QMAP_OK (0) is success. A code's value, name and
 * description never change once released; new codes are appended, retired ones are never reused.
 * Codes 1..39 are about .qmap files (their comments name the rule of spec/FORMAT.md section 7), 40.. about
 * the inputs of convert/quantize and about running models.
 */
#ifndef QMAP_ERRORS_H
#define QMAP_ERRORS_H

/* X-macro: X(P##NAME, value, description); P is the prefix the user of the list wants (QMAP_ here, QM_
 * inside the library's format/ module, which spells the same codes with its own prefix). */
#define QMAP_STATUS_LIST(X, P) \
    X(P##OK,  0, "success") \
    X(P##ERR_IO,  1, "I/O error") \
    X(P##ERR_NOMEM,  2, "out of memory") \
    X(P##ERR_INVALID_ARGUMENT,  3, "invalid argument") \
    X(P##ERR_STATE,  4, "call not allowed in this state") \
    X(P##ERR_NOT_FOUND,  5, "not found") \
    X(P##ERR_TYPE_MISMATCH,  6, "value has another type") \
    X(P##ERR_OVERFLOW,  7, "size or offset overflows 64 bits") /* R-GEN-1 */ \
    X(P##ERR_BAD_MAGIC,  8, "not a qmap file (bad magic)") /* R-HDR-1 */ \
    X(P##ERR_UNSUPPORTED_VERSION,  9, "unsupported major version") /* R-HDR-2 */ \
    X(P##ERR_TRUNCATED, 10, "file is shorter than its header says") /* R-HDR-1,3 */ \
    X(P##ERR_TRAILING_BYTES, 11, "file is longer than its header says") /* R-HDR-4 */ \
    X(P##ERR_BAD_ALIGNMENT, 12, "alignment is not a power of two in [64, 2^30]") /* R-HDR-5 */ \
    X(P##ERR_RESERVED_NONZERO, 13, "reserved field is not zero") /* R-HDR-6, R-TENSOR-9 */ \
    X(P##ERR_TOO_MANY, 14, "count above the format's cap") /* R-HDR-7 */ \
    X(P##ERR_BAD_LAYOUT, 15, "section offsets are not where the format puts them") /* R-HDR-8 */ \
    X(P##ERR_HEADER_CHECKSUM, 16, "header checksum mismatch") /* R-HDR-9 */ \
    X(P##ERR_PADDING_NONZERO, 17, "padding byte is not zero") /* R-HDR-10, R-DATA-2 */ \
    X(P##ERR_META_OVERRUN, 18, "metadata entry extends past its section") /* R-META-1 */ \
    X(P##ERR_BAD_KEY, 19, "metadata key is empty or too long") /* R-META-2 */ \
    X(P##ERR_BAD_UTF8, 20, "string is not valid UTF-8 or contains NUL") /* R-META-3,7, R-TENSOR-3 */ \
    X(P##ERR_UNKNOWN_META_TYPE, 21, "unknown metadata value type") /* R-META-4 */ \
    X(P##ERR_BAD_BOOL, 22, "boolean byte is not 0 or 1") /* R-META-5 */ \
    X(P##ERR_META_TOO_LONG, 23, "string or array longer than the format's cap") /* R-META-6 */ \
    X(P##ERR_DUPLICATE_KEY, 24, "duplicate metadata key") /* R-META-8 */ \
    X(P##ERR_META_SIZE, 25, "metadata entries do not fill their section") /* R-META-9 */ \
    X(P##ERR_TABLE_OVERRUN, 26, "tensor table entry extends past its section, or bytes are left over") /* R-TENSOR-1 */ \
    X(P##ERR_BAD_NAME, 27, "tensor name is empty or too long") /* R-TENSOR-2 */ \
    X(P##ERR_DUPLICATE_NAME, 28, "duplicate tensor name") /* R-TENSOR-4 */ \
    X(P##ERR_UNKNOWN_DTYPE, 29, "unknown dtype") /* R-TENSOR-5 */ \
    X(P##ERR_BAD_RANK, 30, "rank is not in 1..4") /* R-TENSOR-6 */ \
    X(P##ERR_BAD_DIM, 31, "dimension is zero or above 2^32") /* R-TENSOR-7 */ \
    X(P##ERR_TOO_MANY_ELEMENTS, 32, "element count above 2^40") /* R-TENSOR-8 */ \
    X(P##ERR_SIZE_MISMATCH, 33, "byte size does not match dtype and dims") /* R-TENSOR-10 */ \
    X(P##ERR_MISALIGNED, 34, "tensor data is not aligned") /* R-TENSOR-11 */ \
    X(P##ERR_OUT_OF_BOUNDS, 35, "tensor data lies outside the data region") /* R-TENSOR-12 */ \
    X(P##ERR_TENSOR_OVERLAP, 36, "tensor overlaps the previous one or is out of order") /* R-TENSOR-13 */ \
    X(P##ERR_DATA_END, 37, "last tensor does not end at the end of the file") /* R-TENSOR-14 */ \
    X(P##ERR_TENSOR_CHECKSUM, 38, "tensor checksum mismatch") /* R-DATA-1 */ \
    X(P##ERR_BAD_TENSOR_DATA, 39, "tensor data breaks its dtype's rules") /* R-DATA-2 */ \
    /* 40..: errors about the inputs of qmap convert / quantize and of running models (not about .qmap files) */ \
    X(P##ERR_BAD_SOURCE, 40, "input file is malformed or truncated") \
    X(P##ERR_UNSUPPORTED, 41, "input uses a feature qmap does not support") \
    X(P##ERR_FORBIDDEN, 42, "pickle uses a global or opcode that is not allowed") \
    X(P##ERR_SHAPE, 43, "tensor shape does not match the model") \
    X(P##ERR_MISSING_TENSOR, 44, "a tensor the model needs is missing") \
    X(P##ERR_UNEXPECTED_TENSOR, 45, "a tensor the model does not use is present") \
    X(P##ERR_NONFINITE, 46, "weight contains NaN or Inf") \
    X(P##ERR_BAD_CONFIG, 47, "model config is missing a value or has a bad one") \
    X(P##ERR_UNKNOWN_ARCH, 48, "unknown model architecture")

typedef enum qmap_status {
#define QMAP_X_ENUM(name, value, desc) name = value,
    QMAP_STATUS_LIST(QMAP_X_ENUM, QMAP_)
#undef QMAP_X_ENUM
} qmap_status;

#endif /* QMAP_ERRORS_H */
