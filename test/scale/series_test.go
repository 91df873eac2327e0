package main

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"gonum.org/v1/plot/plotter"
)

// at is a sample of the writes of one client, "c", at the given second.
func at(sec float64, writes float64) sample {
	return sample{at: time.Duration(sec * float64(time.Second)), writes: map[string]float64{"c": writes}}
}

func TestRatesAreIncreasesPerSecondAtEachIntervalsEnd(t *testing.T) {
	for _, tt := range []struct {
		name    string
		samples []sample
		want    plotter.XYs
	}{
		{"no sample", nil, nil},
		{"one sample has no interval", []sample{at(0, 5)}, nil},
		{"steady", []sample{at(0, 0), at(2, 10), at(4, 20)}, plotter.XYs{{X: 2, Y: 5}, {X: 4, Y: 5}}},
		{"uneven intervals", []sample{at(0, 0), at(1, 3), at(4, 9)}, plotter.XYs{{X: 1, Y: 3}, {X: 4, Y: 2}}},
		{"quiet", []sample{at(0, 7), at(2, 7)}, plotter.XYs{{X: 2, Y: 0}}},
		{"a restart resets the counter: its new value is the increase", []sample{at(0, 100), at(2, 110), at(4, 6)}, plotter.XYs{{X: 2, Y: 5}, {X: 4, Y: 3}}},
		{"a sample at the same moment is skipped", []sample{at(0, 0), at(0, 4), at(2, 8)}, plotter.XYs{{X: 2, Y: 2}}},
		{
			"a sample without the counter leaves out both its intervals",
			[]sample{at(0, 0), at(2, 4), {at: 4 * time.Second}, at(6, 12), at(8, 16)},
			plotter.XYs{{X: 2, Y: 2}, {X: 8, Y: 2}},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, rates(tt.samples, writesOf("c"))); diff != "" {
				t.Errorf("rates (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAllWritesAddsUpTheClients(t *testing.T) {
	s0 := sample{at: 0, writes: map[string]float64{"a": 1, "b": 2}}
	s1 := sample{at: 2 * time.Second, writes: map[string]float64{"a": 5, "b": 6}}
	if diff := cmp.Diff(plotter.XYs{{X: 2, Y: 4}}, rates([]sample{s0, s1}, allWrites)); diff != "" {
		t.Errorf("rates of all writes (-want +got):\n%s", diff)
	}
}

func TestLevelsScaleTheGaugeAndSkipSamplesWithoutIt(t *testing.T) {
	samples := []sample{
		{at: 0, rss: map[string]float64{"p": 2 * mib}},
		{at: 2 * time.Second, rss: map[string]float64{}},
		{at: 4 * time.Second, rss: map[string]float64{"p": 3 * mib}},
	}
	if diff := cmp.Diff(plotter.XYs{{X: 0, Y: 2}, {X: 4, Y: 3}}, levels(samples, rssOf("p"), mib)); diff != "" {
		t.Errorf("levels (-want +got):\n%s", diff)
	}
}

func TestReadyCurvesCountTheReadyVMsOfEachBackend(t *testing.T) {
	start := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	change := func(sec float64, be string, delta int) readyChange {
		return readyChange{at: start.Add(time.Duration(sec * float64(time.Second))), backend: be, delta: delta}
	}
	end := 10 * time.Second
	for _, tt := range []struct {
		name    string
		changes []readyChange
		want    map[string]plotter.XYs
	}{
		{"no VM", nil, map[string]plotter.XYs{}},
		{
			"rise, then deletion",
			[]readyChange{change(1, "a", 1), change(2, "a", 1), change(8, "a", -1), change(9, "a", -1)},
			map[string]plotter.XYs{"a": {{X: 0, Y: 0}, {X: 1, Y: 1}, {X: 2, Y: 2}, {X: 8, Y: 1}, {X: 9, Y: 0}, {X: 10, Y: 0}}},
		},
		{
			"backends count apart, each curve spanning the run",
			[]readyChange{change(1, "a", 1), change(3, "b", 1), change(4, "a", 1)},
			map[string]plotter.XYs{
				"a": {{X: 0, Y: 0}, {X: 1, Y: 1}, {X: 4, Y: 2}, {X: 10, Y: 2}},
				"b": {{X: 0, Y: 0}, {X: 3, Y: 1}, {X: 10, Y: 1}},
			},
		},
		{
			"out of order changes are counted in time order",
			[]readyChange{change(5, "a", -1), change(2, "a", 1)},
			map[string]plotter.XYs{"a": {{X: 0, Y: 0}, {X: 2, Y: 1}, {X: 5, Y: 0}, {X: 10, Y: 0}}},
		},
		{
			"changes outside the run are drawn at its edges",
			[]readyChange{change(-1, "a", 1), change(12, "a", -1)},
			map[string]plotter.XYs{"a": {{X: 0, Y: 0}, {X: 0, Y: 1}, {X: 10, Y: 0}, {X: 10, Y: 0}}},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, readyCurves(tt.changes, start, end)); diff != "" {
				t.Errorf("readyCurves (-want +got):\n%s", diff)
			}
		})
	}
}
