package natsbus

// ResultsInFlight reports the worker's results published in their own
// message whose first attempt has not ended, and those waiting for a
// message to carry them (a batch).
func (w *Worker) ResultsInFlight() (alone, waiting int) {
	return int(w.resultsAlone.Load()), w.resultLanes.waiting()
}

// BatchEvery is how many interactive calls a worker takes, while others
// wait, before it lets one batch call of the same tool start.
const BatchEvery = batchEvery
