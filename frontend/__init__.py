"""The pages a person uses: templates, static JS/CSS and their views."""
