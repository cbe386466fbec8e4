package storelog

import (
	"context"

	"github.com/agentbox/agentbox/internal/store"
)

// ScanBudget bounds the entries one Scan reads: a selective filter over a
// long log gets a partial (maybe empty) page, with more set and a cursor
// to go on from.
const ScanBudget = 20000

// Scan reads the log after the cursor after, oldest first, and keeps the
// records match accepts, at most limit of them. An entry decode refuses is
// skipped. next is the cursor after the last entry read; more reports
// that entries remain after it.
func Scan[T any](ctx context.Context, st store.EventLog, after uint64, limit int,
	decode func(seq uint64, data []byte) (T, error), match func(*T) bool) (kept []T, next uint64, more bool, err error) {
	kept, next = []T{}, after
	for scanned := 0; scanned < ScanBudget; {
		batch, err := st.ReadEvents(ctx, next, min(500, ScanBudget-scanned))
		if err != nil {
			return nil, after, false, err
		}
		if len(batch) == 0 {
			return kept, next, false, nil
		}
		for _, ent := range batch {
			scanned++
			next = ent.Seq
			v, err := decode(ent.Seq, ent.Data)
			if err != nil || !match(&v) {
				continue
			}
			if kept = append(kept, v); len(kept) == limit {
				return kept, next, remains(ctx, st, next), nil
			}
		}
	}
	return kept, next, remains(ctx, st, next), nil
}

// remains reports whether the log has an entry after next.
func remains(ctx context.Context, st store.EventLog, next uint64) bool {
	more, err := st.ReadEvents(ctx, next, 1)
	return err == nil && len(more) > 0
}
