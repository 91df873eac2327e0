package main

import (
	"testing"
	"time"
)

func TestPercentileIsTheNearestRank(t *testing.T) {
	s := time.Second
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(100-i) * s // 100 s … 1 s, unsorted on purpose
	}
	for _, tt := range []struct {
		name string
		ds   []time.Duration
		p    float64
		want time.Duration
	}{
		{"no VM", nil, 50, 0},
		{"one VM is every percentile", []time.Duration{7 * s}, 99, 7 * s},
		{"p50 of 1…100 s", hundred, 50, 50 * s},
		{"p95 of 1…100 s", hundred, 95, 95 * s},
		{"p99 of 1…100 s", hundred, 99, 99 * s},
		{"p100 is the slowest", hundred, 100, 100 * s},
		{"p50 of four rounds up to the second", []time.Duration{4 * s, 1 * s, 3 * s, 2 * s}, 50, 2 * s},
		{"p99 of four is the slowest", []time.Duration{4 * s, 1 * s, 3 * s, 2 * s}, 99, 4 * s},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := percentile(tt.ds, tt.p); got != tt.want {
				t.Errorf("percentile(%v, %v) = %v, want %v", tt.ds, tt.p, got, tt.want)
			}
		})
	}
	if hundred[0] != 100*s {
		t.Error("percentile sorted its argument in place")
	}
}
