package main

import (
	"math/big"
	"sort"
	"sync"
)

// maxRV is the largest resourceVersion a conformant server may send: 2^128-1 (KEP-5504;
// HaveValidResourceVersion in test/e2e/common/apimachinery/resourceversion_matchers.go).
var maxRV = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 128), big.NewInt(1))

// validRV reports whether rv is a positive decimal integer without leading zeros of at most
// 128 bits.
func validRV(rv string) bool {
	if rv == "" || rv[0] == '0' {
		return false
	}
	for i := 0; i < len(rv); i++ {
		if rv[i] < '0' || rv[i] > '9' {
			return false
		}
	}
	n, ok := new(big.Int).SetString(rv, 10)
	return ok && n.Cmp(maxRV) <= 0
}

// compareRV orders two valid resourceVersions as decimal integers the way KEP-5504 compares
// them without parsing: the longer is greater, equal lengths compare lexically. Returns -1, 0
// or +1.
func compareRV(a, b string) int {
	switch {
	case len(a) < len(b):
		return -1
	case len(a) > len(b):
		return 1
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// maxInvalidRVs caps how many invalid resourceVersions a report lists.
const maxInvalidRVs = 20

// rvLog collects every distinct resourceVersion a scenario saw. Safe for concurrent use.
type rvLog struct {
	mu      sync.Mutex
	seen    map[string]struct{}
	order   []string // first-seen order
	invalid []string
}

func newRVLog() *rvLog { return &rvLog{seen: map[string]struct{}{}} }

// add records rv (empty strings are ignored: objects that were never stored carry none).
func (l *rvLog) add(rv string) {
	if rv == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, dup := l.seen[rv]; dup {
		return
	}
	l.seen[rv] = struct{}{}
	l.order = append(l.order, rv)
	if !validRV(rv) {
		l.invalid = append(l.invalid, rv)
	}
}

// rvSummary is the JSON form of an rvLog.
type rvSummary struct {
	Count        int      `json:"rvs_seen_count"`
	AllValid     bool     `json:"all_rvs_valid"`
	Invalid      []string `json:"rvs_invalid"`
	InvalidTotal int      `json:"rvs_invalid_total"`
}

func (l *rvLog) summary() rvSummary {
	l.mu.Lock()
	defer l.mu.Unlock()
	invalid := append([]string{}, l.invalid...)
	sort.Strings(invalid)
	s := rvSummary{Count: len(l.order), AllValid: len(invalid) == 0, InvalidTotal: len(invalid), Invalid: invalid}
	if len(s.Invalid) > maxInvalidRVs {
		s.Invalid = s.Invalid[:maxInvalidRVs]
	}
	return s
}

// all returns every distinct resourceVersion in first-seen order.
func (l *rvLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string{}, l.order...)
}
