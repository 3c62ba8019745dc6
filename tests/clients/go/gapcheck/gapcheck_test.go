package gapcheck

import (
	"reflect"
	"testing"
)

func TestSplitAtAnOffsetInsideAGap(t *testing.T) {
	rs := []Record{NewRecord(1, []byte("a"), []byte("x"), 5), NewRecord(4, []byte("b"), nil, 6)}
	below, rest := Split(rs, 3)
	if !reflect.DeepEqual(below, rs[:1]) || !reflect.DeepEqual(rest, rs[1:]) {
		t.Fatalf("split at 3: %v %v", below, rest)
	}
	if below, rest := Split(rs, 9); len(below) != 2 || rest != nil {
		t.Fatalf("split past the end: %v %v", below, rest)
	}
	if rest[0].Value != nil || *below[0].Value != "x" {
		t.Fatalf("a tombstone keeps a nil value: %+v", rs)
	}
}
