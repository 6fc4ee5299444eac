package broker

import (
	"cmp"
	"context"
	"sync"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/projections"
)

// BulkLimitMax caps the jobs one bulk action takes; NextCursor resumes past them.
const BulkLimitMax = 1000

// Bulk is what a bulk cancel or re-drive did with one page of the jobs its filter matched.
type Bulk struct {
	// Matched counts the jobs of the page; Done those the action changed (for a cancel, the
	// leased ones among them only asked to stop: CancelRequested counts those).
	Matched, Done, CancelRequested int
	// Skipped counts, by code, the jobs the action refused: a job that finished meanwhile
	// (ALREADY_TERMINAL), or a re-drive over the tenant's quota (QUOTA_EXCEEDED).
	Skipped map[actors.Code]int
	// NextCursor, if set, is where the next call goes on: the filter matched more than the page,
	// or a re-drive stopped at the quota, and the jobs from there on are still to do. When the
	// page's first job waits for the quota, it is the cursor the call was given (CursorFirst for
	// none): the cursor does not move until there is room.
	NextCursor string
	// Receipt is the last event the action wrote, if any.
	Receipt actors.Receipt
}

// CancelMatching cancels one page (f.Limit, at most BulkLimitMax) of a tenant's live jobs that
// f matches, oldest first: a waiting job at once, a leased one by request. Each job is one
// cancel, as POST /v1/jobs/{id}/cancel makes it, so its rules and events are that command's.
func (b *Broker) CancelMatching(ctx context.Context, tenant, apiKeyID string, f projections.JobFilter) (Bulk, error) {
	f.Tenant, f.Live = tenant, true
	return b.bulk(ctx, f, func(id string) (actors.Ref, any) {
		return actors.DispatcherRef(), actors.Cancel{Tenant: tenant, JobID: id, APIKeyID: apiKeyID}
	})
}

// RedriveMatching re-drives one page of a tenant's dead letters that f matches, oldest first,
// each against the tenant's quota as POST /v1/jobs/{id}/retry does.
func (b *Broker) RedriveMatching(ctx context.Context, tenant, apiKeyID string, f projections.JobFilter) (Bulk, error) {
	f.Tenant, f.Status = tenant, projections.StatusFailed
	return b.bulk(ctx, f, func(id string) (actors.Ref, any) {
		return actors.TenantRef(tenant), actors.Redrive{Tenant: tenant, JobID: id, APIKeyID: apiKeyID}
	})
}

// bulk sends the command of every job of one page at once, so that group commit writes them in
// a few fsyncs, and gathers the answers. A job refused for a reason that may pass (the quota)
// sets NextCursor just before it, so that a later call takes it and what follows again; the
// jobs after it that were done meanwhile are then refused as finished, and not counted twice.
func (b *Broker) bulk(ctx context.Context, f projections.JobFilter, command func(id string) (actors.Ref, any)) (Bulk, error) {
	if f.Limit <= 0 || f.Limit > BulkLimitMax {
		f.Limit = BulkLimitMax
	}
	page, more := b.List(f)
	out := Bulk{Matched: len(page), Skipped: map[actors.Code]int{}}
	errs := make([]error, len(page))
	receipts := make([]actors.Receipt, len(page))
	var wg sync.WaitGroup
	for i, j := range page {
		wg.Go(func() {
			to, msg := command(j.ID)
			receipts[i], errs[i] = b.done(ctx, to, msg)
		})
	}
	wg.Wait()
	retryFrom := -1
	for i, err := range errs {
		if err == nil {
			out.Done++
			if receipts[i].Seq > out.Receipt.Seq {
				out.Receipt = receipts[i]
			}
			continue
		}
		r, ok := err.(*actors.Rejection)
		if !ok {
			return out, err // the broker stopped or ctx ended: nothing here is certain
		}
		switch r.Code {
		case actors.CodeAlreadyTerminal, actors.CodeNotDeadLettered, actors.CodeJobNotFound, actors.CodeJobExpired:
			// It finished, or was re-driven or expired, between the page and its command.
		default:
			if retryFrom < 0 {
				retryFrom = i
			}
		}
		out.Skipped[r.Code]++
	}
	switch {
	case retryFrom > 0:
		out.NextCursor = page[retryFrom-1].ID
	case retryFrom == 0: // the page's first job waits: the cursor stays where it was
		out.NextCursor = cmp.Or(f.After, projections.CursorFirst)
	case more && len(page) > 0:
		out.NextCursor = page[len(page)-1].ID
	}
	if f.Status == "" { // a cancel: which of the cancelled jobs are only asked to stop
		b.rt.Read(func(set *projections.Set) {
			for i, j := range page {
				if errs[i] == nil && statusOf(set, j.ID) == projections.StatusLeased {
					out.CancelRequested++
				}
			}
		})
	}
	return out, nil
}

func statusOf(set *projections.Set, id string) projections.Status {
	if j := set.JobRef(id); j != nil {
		return j.Status
	}
	return ""
}
