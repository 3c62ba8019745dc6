// Package gapcheck holds what the Go programs of test_compaction_gaps.py share (franz-go's
// tests/clients/go/admin/gaps and sarama's tests/clients/go/sarama): the expectation file
// tests/clients/compacted.py writes, the records the checks compare, and the lines they print.
// Each program checks its own client against a compacted partition with offset gaps; this
// package knows no client.
package gapcheck

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strings"
)

// Record is one record as the expectation and the checks describe it.
type Record struct {
	Offset    int64   `json:"offset"`
	Key       string  `json:"key"`
	Value     *string `json:"value"`
	Timestamp int64   `json:"timestamp"`
}

// NewRecord is the Record of a fetched record: a nil value (a tombstone) stays nil.
func NewRecord(offset int64, key, value []byte, timestampMs int64) Record {
	var v *string
	if value != nil {
		s := string(value)
		v = &s
	}
	return Record{offset, string(key), v, timestampMs}
}

// Expectation is compacted.py's Expectation.to_json.
type Expectation struct {
	Topic             string     `json:"topic"`
	End               int64      `json:"end"`
	Survivors         []Record   `json:"survivors"`
	CommitAt          int64      `json:"commit_at"`
	DeleteTo          int64      `json:"delete_to"`
	ByTime            [][2]int64 `json:"by_time"`
	ByTimeAfterDelete [][2]int64 `json:"by_time_after_delete"`
}

// ReadExpectation reads the expectation JSON at `file`; it fails the run if it cannot.
func ReadExpectation(file string) Expectation {
	raw, err := os.ReadFile(file)
	if err != nil {
		Fail("read expectation", err)
	}
	var e Expectation
	if err := json.Unmarshal(raw, &e); err != nil {
		Fail("parse expectation", err)
	}
	return e
}

// Fail prints check `name`'s failure and ends the run with status 1.
func Fail(name string, err error) {
	fmt.Printf("FAIL %s: %v\n", name, err)
	os.Exit(1)
}

// Ok prints that check `name` passed, with what it saw.
func Ok(name, format string, args ...any) {
	fmt.Printf("ok   %s: %s\n", name, fmt.Sprintf(format, args...))
}

// Split divides survivors at offset `at`: those below it, and the others.
func Split(rs []Record, at int64) ([]Record, []Record) {
	for i, r := range rs {
		if r.Offset >= at {
			return rs[:i], rs[i:]
		}
	}
	return rs, nil
}

// Same checks that `got` is exactly `want` (offsets, keys, values, timestamps): it prints
// check `name`'s line, or fails the run showing both.
func Same(name string, got, want []Record) {
	if !reflect.DeepEqual(got, want) {
		Fail(name, fmt.Errorf("got %s\nwant %s", show(got), show(want)))
	}
	Ok(name, "%d records at offsets %v", len(got), offsets(got))
}

func offsets(rs []Record) []int64 {
	out := make([]int64, len(rs))
	for i, r := range rs {
		out[i] = r.Offset
	}
	return out
}

func show(rs []Record) string {
	var b strings.Builder
	for _, r := range rs {
		v := "<nil>"
		if r.Value != nil {
			v = *r.Value
		}
		fmt.Fprintf(&b, "[%d %s=%s @%d] ", r.Offset, r.Key, v, r.Timestamp)
	}
	return b.String()
}
