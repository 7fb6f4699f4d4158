package protocol

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"slices"
	"strconv"
)

// MaxResultBatch bounds the results of one [ResultBatch].
const MaxResultBatch = 256

// MinResultBatchBytes is the least batch size a coordinator may announce
// ([ResultBatchHeader]).
const MinResultBatchBytes = 1024

// ResultBatchStored is the value of [HeaderResultBatch] on a message of
// the results stream whose body is a [ResultBatch] rather than one
// [Result].
const ResultBatchStored = "1"

// DecodeStoredResults decodes a message of the results stream whose
// [HeaderResultBatch] is batchHeader: the results of a [ResultBatch], or
// the one [Result] of any other message, strictly and within limit bytes
// as [DecodeResultBatch] and [DecodeResult] do.
func DecodeStoredResults(batchHeader string, data []byte, limit int) ([]Result, error) {
	if batchHeader == ResultBatchStored {
		b, err := DecodeResultBatch(data, limit)
		return b.Results, err
	}
	r, err := DecodeResult(data, limit)
	if err != nil {
		return nil, err
	}
	return []Result{r}, nil
}

// ResultBatchHeader is the value of [HeaderResultBatch] on a call whose
// coordinator decodes a [ResultBatch] of up to limit bytes (its decode
// limit for results).
func ResultBatchHeader(limit int) string { return strconv.Itoa(limit) }

// ResultBatchLimit reads [HeaderResultBatch] of a call: the most bytes of
// a batch its coordinator decodes, and false when the call does not say
// that it reads batches (no header, not a decimal number, under
// [MinResultBatchBytes]); a worker then answers it alone.
func ResultBatchLimit(header string) (int, bool) {
	if header == "" || len(header) > 10 || header[0] == '0' {
		return 0, false
	}
	for i := 0; i < len(header); i++ {
		if header[i] < '0' || header[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(header)
	if err != nil || n < MinResultBatchBytes || n > math.MaxInt32 {
		return 0, false
	}
	return n, true
}

// ResultBatch answers several calls of one run to one tool in one stored
// message: a worker sends one, on the calls' result subject, only for
// calls whose message carried [HeaderResultBatch] (their coordinator reads
// batches, of the size it says), and marks it with [HeaderResultBatch] so that readers know its
// shape. Each result is a whole [Result] of the batch's run, its call key
// at most once in the batch.
type ResultBatch struct {
	V       int      `json:"v"`
	RunID   RunID    `json:"run_id"`
	Results []Result `json:"results"`
}

// Validate checks the fields' rules, and each result's.
func (b *ResultBatch) Validate() error {
	if err := checkV(b.V); err != nil {
		return err
	}
	switch {
	case b.RunID == "":
		return missing("run_id")
	case !b.RunID.Valid():
		return invalid("run_id", "must match "+TokenPattern)
	case len(b.Results) == 0:
		return missing("results")
	case len(b.Results) > MaxResultBatch:
		return invalid("results", "more than "+strconv.Itoa(MaxResultBatch))
	}
	seen := make(map[CallKey]struct{}, len(b.Results))
	for i := range b.Results {
		r := &b.Results[i]
		if err := r.Validate(); err != nil {
			return err
		}
		if r.RunID != b.RunID {
			return invalid("results", "a result of another run")
		}
		if _, dup := seen[r.CallKey]; dup {
			return invalid("results", "a call key twice")
		}
		seen[r.CallKey] = struct{}{}
	}
	return nil
}

// DecodeResultBatch decodes and validates a [ResultBatch], as strictly as
// every decoder of the package: one JSON object of at most limit bytes,
// no unknown fields (in the results too), no trailing data.
func DecodeResultBatch(data []byte, limit int) (ResultBatch, error) {
	var m ResultBatch
	err := decode(data, limit, &m)
	return m, err
}

// ResultBatchBytes is the size of the [ResultBatch] body that
// [EncodeResultBatch] builds for run from n encoded results of size
// bytes in all.
func ResultBatchBytes(run RunID, n, size int) int {
	return resultBatchHeadBytes(run) + size + max(n-1, 0) + len(resultBatchTail)
}

// EncodeResultBatch builds the body of a [ResultBatch] of run from its
// results, each already encoded (by [EncodeResultWithin]), without
// decoding them again. The caller keeps the batch's rules: results of
// run, each call key once, at most [MaxResultBatch].
func EncodeResultBatch(run RunID, encoded [][]byte) []byte {
	size := 0
	for _, r := range encoded {
		size += len(r)
	}
	out := make([]byte, 0, ResultBatchBytes(run, len(encoded), size))
	out = append(out, resultBatchHead(run)...)
	for i, r := range encoded {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, r...)
	}
	return append(out, resultBatchTail...)
}

const resultBatchTail = "]}"

// resultBatchHeadBytes is len(resultBatchHead(run)), counted without
// building it when run is a valid token, which JSON quotes as it is: a
// worker sizes a batch with it once for every result it adds.
func resultBatchHeadBytes(run RunID) int {
	if !run.Valid() {
		return len(resultBatchHead(run))
	}
	return len(`{"v":`+strconv.Itoa(Version)+`,"run_id":`) + len(run) + 2 + len(`,"results":[`)
}

func resultBatchHead(run RunID) string {
	q, _ := json.Marshal(string(run)) // a string always encodes
	return `{"v":` + strconv.Itoa(Version) + `,"run_id":` + string(q) + `,"results":[`
}

// ResultBatchMsgID is the dedup id of a [ResultBatch] of tool's results
// for keys: the same set of calls (in any order) gets the same id, so a
// batch published again is stored once. Like [ResultMsgID] it names the
// tool, and it cannot be taken by one who does not know every key.
func ResultBatchMsgID(tool ToolName, keys []CallKey) string {
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	h := sha256.New()
	h.Write([]byte(tool))
	for _, k := range sorted {
		h.Write([]byte{0})
		h.Write([]byte(k))
	}
	return "results-" + string(tool) + "-" + hex.EncodeToString(h.Sum(nil)[:16])
}
