"""The publish protocol: projection of versioned events, partition rewrite, commit with retries."""
