package natsbus

// ResultsInFlight reports the worker's results published in their own
// message whose first attempt has not ended, and those waiting for a
// message to carry them (a batch).
func (w *Worker) ResultsInFlight() (alone, waiting int) {
	return int(w.resultsAlone.Load()), w.resultLanes.waiting()
}
