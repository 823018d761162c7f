package trainer

import (
	"fmt"
	"testing"
)

// TestToSliceLogicalOrder: toSlice reads a tensor's values in its logical
// order, transposed (non-contiguous) ones included, for each dtype it
// takes, and refuses a dtype that is not T's.
func TestToSliceLogicalOrder(t *testing.T) {
	x := fromSlice([]float32{1, 2, 3, 4, 5, 6}, []int64{2, 3})
	defer drop(x)
	xt := must(x.Transpose(0, 1, false)) // [[1 4] [2 5] [3 6]]
	defer drop(xt)
	if got := toSlice[float32](xt); fmt.Sprint(got) != "[1 4 2 5 3 6]" {
		t.Errorf("transposed float32: %v", got)
	}
	i := fromSlice([]int64{7, -8, 9}, []int64{3})
	defer drop(i)
	if got := toSlice[int64](i); fmt.Sprint(got) != "[7 -8 9]" {
		t.Errorf("int64: %v", got)
	}
	d := fromSlice([]float64{0.5}, []int64{1})
	defer drop(d)
	if got := toSlice[float64](d); fmt.Sprint(got) != "[0.5]" {
		t.Errorf("float64: %v", got)
	}
	defer func() {
		if recover() == nil {
			t.Error("toSlice[int64] of a float32 tensor did not refuse it")
		}
	}()
	toSlice[int64](x)
}
