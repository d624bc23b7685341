"""What the service sends out: GitHub statuses and notifications."""
