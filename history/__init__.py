"""The portal's side of the Spark pipeline: impact previews of proposals, and hourly usage history."""
