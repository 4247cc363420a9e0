package algo

import "fmt"

// DType is the element type of a buffer. The numeric values are part of the
// wire format (they are carried in frame headers) and of the C ABI.
type DType uint8

// Element types. The order follows NCCL's ncclDataType_t where NCCL has the
// type; bfloat16 comes last as in NCCL.
const (
	Int8     DType = 0
	Uint8    DType = 1
	Int32    DType = 2
	Uint32   DType = 3
	Int64    DType = 4
	Uint64   DType = 5
	Float16  DType = 6
	Float32  DType = 7
	Float64  DType = 8
	BFloat16 DType = 9

	numDTypes = 10
)

var dtypeInfo = [numDTypes]struct {
	name string
	size int
}{
	Int8:     {"int8", 1},
	Uint8:    {"uint8", 1},
	Int32:    {"int32", 4},
	Uint32:   {"uint32", 4},
	Int64:    {"int64", 8},
	Uint64:   {"uint64", 8},
	Float16:  {"float16", 2},
	Float32:  {"float32", 4},
	Float64:  {"float64", 8},
	BFloat16: {"bfloat16", 2},
}

// DTypes lists every supported element type.
func DTypes() []DType {
	return []DType{Int8, Uint8, Int32, Uint32, Int64, Uint64, Float16, BFloat16, Float32, Float64}
}

// Valid reports whether d is a known element type.
func (d DType) Valid() bool { return d < numDTypes }

// Size returns the size of one element in bytes (0 for an invalid type).
func (d DType) Size() int {
	if !d.Valid() {
		return 0
	}
	return dtypeInfo[d].size
}

// String returns the lower-case name of the type, as nccl-tests prints it.
func (d DType) String() string {
	if !d.Valid() {
		return fmt.Sprintf("dtype(%d)", uint8(d))
	}
	return dtypeInfo[d].name
}

// IsFloat reports whether d is a floating-point type.
func (d DType) IsFloat() bool {
	return d == Float16 || d == BFloat16 || d == Float32 || d == Float64
}

// ParseDType parses a type name as String returns it; it also accepts the
// short names nccl-tests uses (half, float, double, bf16, ...).
func ParseDType(s string) (DType, error) {
	switch s {
	case "int8", "char", "i8":
		return Int8, nil
	case "uint8", "u8":
		return Uint8, nil
	case "int32", "int", "i32":
		return Int32, nil
	case "uint32", "u32":
		return Uint32, nil
	case "int64", "i64":
		return Int64, nil
	case "uint64", "u64":
		return Uint64, nil
	case "float16", "half", "fp16", "f16":
		return Float16, nil
	case "bfloat16", "bf16":
		return BFloat16, nil
	case "float32", "float", "fp32", "f32":
		return Float32, nil
	case "float64", "double", "fp64", "f64":
		return Float64, nil
	}
	return 0, fmt.Errorf("unknown dtype %q", s)
}

// Op is a reduction operation. The numeric values are part of the wire format
// and of the C ABI and follow NCCL's ncclRedOp_t.
type Op uint8

// Reduction operations.
const (
	Sum  Op = 0
	Prod Op = 1
	Max  Op = 2
	Min  Op = 3
	Avg  Op = 4

	numOps = 5
)

var opNames = [numOps]string{Sum: "sum", Prod: "prod", Max: "max", Min: "min", Avg: "avg"}

// Ops lists every supported reduction.
func Ops() []Op { return []Op{Sum, Prod, Max, Min, Avg} }

// Valid reports whether o is a known reduction.
func (o Op) Valid() bool { return o < numOps }

// String returns the lower-case name of the reduction.
func (o Op) String() string {
	if !o.Valid() {
		return fmt.Sprintf("op(%d)", uint8(o))
	}
	return opNames[o]
}

// ParseOp parses a reduction name as String returns it.
func ParseOp(s string) (Op, error) {
	for i, n := range opNames {
		if n == s {
			return Op(i), nil
		}
	}
	return 0, fmt.Errorf("unknown reduction %q", s)
}

// Combiner returns the reduction that combines partial results of o: Avg is
// computed as a Sum followed by Finalize; every other op combines as itself.
func (o Op) Combiner() Op {
	if o == Avg {
		return Sum
	}
	return o
}
