package api

import (
	"errors"
	"example.com/bad/executor"
	"net/http"
	"sort"
	"strings"
	"sync"
)

var hits atomic.Int64

var mu sync.Mutex

var counter, table, names, limit = 0, map[string]int{}, []string{"b", "a"}, 1.0

func touch() {
	counter = 1
	counter++
	table["x"] = 1
	sort.Strings(names)
	delete(table, "x")
	_ = &limit
	http.DefaultClient = nil
	executor.Run()
}

func classify(err error) bool {
	switch {
	case strings.Contains(err.Error(), "x"):
		return true
	}
	if err.Error() == "y" {
		return true
	}
	switch err.Error() {
	}
	return errors.Is(err, nil)
}

// Not problems: locals that shadow, reads, sentinels.
var ErrFine = errors.New("fine")

func fine() int {
	counter := 5
	counter = 6
	table := map[string]int{}
	table["y"] = counter
	delete(table, "y")
	return counter + len(names) + int(limit)
}

func setup() {
	slog.SetDefault(nil)
}
