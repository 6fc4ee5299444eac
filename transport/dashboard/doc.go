// Package dashboard is the operator's web view of one tenant: queues with their depth, running,
// scheduled and dead counts and a throughput sparkline; workers; jobs filtered by status, queue
// and type, page by page; a job's live event timeline; and the dead-letter list with re-drive.
//
// It is static HTML, CSS and JavaScript embedded in the binary: no build step, no framework,
// nothing fetched from elsewhere. The page speaks only the public /v1 API, as any client does,
// with the API key it asks for kept in the tab's session storage (under --auth none it needs
// none). Event timelines read GET /v1/jobs/{id}/events as server-sent events through fetch,
// which, unlike EventSource, can send the Authorization header, so no key ever travels in a
// URL. Everything a client controls (payloads, types, queue names, messages) is put into the
// page as text, never as markup.
package dashboard
