package logwriter

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
