package storelog

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/store"
)

// Records are stored in the order added, numbered by the store, handed to
// Written as stored; one that cannot be encoded is skipped; a full buffer
// drops and counts instead of blocking; Close writes what was added.
func TestWriter(t *testing.T) {
	st := store.NewMemory()
	var got []int
	var firsts []uint64
	w := New(Config[int]{Store: st, Name: "record", Buffer: 4,
		Encode: func(v int) (time.Time, []byte, error) {
			if v < 0 {
				return time.Time{}, nil, errors.New("negative")
			}
			return time.Now(), []byte(strconv.Itoa(v)), nil
		},
		Written: func(first uint64, batch []int) { firsts = append(firsts, first); got = append(got, batch...) }})
	// Not started: the buffer of 4 fills, the rest is dropped at once.
	for _, v := range []int{1, -1, 2, 3, 4, 5} {
		w.Add(v)
	}
	if w.Dropped() != 2 {
		t.Fatalf("dropped %d, want 2 (buffer of 4, 6 added)", w.Dropped())
	}
	w.Start()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w.Close(ctx)
	if len(got) != 3 || got[0] != 1 || got[1] != 2 || got[2] != 3 || len(firsts) != 1 || firsts[0] != 1 {
		t.Fatalf("written %v (first numbers %v), want [1 2 3] numbered from 1", got, firsts)
	}
	if w.Recorded() != 3 {
		t.Fatalf("recorded %d, want 3", w.Recorded())
	}
	entries, err := st.ReadEvents(ctx, 0, 10)
	if err != nil || len(entries) != 3 || string(entries[2].Data) != "3" {
		t.Fatalf("stored %+v %v", entries, err)
	}
}

// Scan keeps what match accepts up to limit, says when more remains, goes
// on from its cursor, and skips entries decode refuses.
func TestScan(t *testing.T) {
	st := store.NewMemory()
	ctx := context.Background()
	var entries []store.LogEntry
	for i := 1; i <= 10; i++ {
		entries = append(entries, store.LogEntry{Time: time.Now(), Data: []byte(strconv.Itoa(i))})
	}
	entries[4].Data = []byte("x") // 5 does not decode
	if _, err := st.AppendEvents(ctx, entries); err != nil {
		t.Fatal(err)
	}
	decode := func(_ uint64, data []byte) (int, error) { return strconv.Atoi(string(data)) }
	even := func(v *int) bool { return *v%2 == 0 }
	got, next, more, err := Scan(ctx, st, 0, 2, decode, even)
	if err != nil || len(got) != 2 || got[0] != 2 || got[1] != 4 || !more || next != 4 {
		t.Fatalf("first page: %v next %d more %v %v", got, next, more, err)
	}
	got, next, more, err = Scan(ctx, st, next, 10, decode, even)
	if err != nil || len(got) != 3 || got[0] != 6 || got[2] != 10 || more || next != 10 {
		t.Fatalf("second page: %v next %d more %v %v", got, next, more, err)
	}
	odd := func(v *int) bool { return *v%2 == 1 }
	if got, _, _, _ := Scan(ctx, st, 0, 10, decode, odd); len(got) != 4 {
		t.Fatalf("odd ones (5 undecodable): %v", got)
	}
}
