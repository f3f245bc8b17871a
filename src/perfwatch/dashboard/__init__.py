"""The live web dashboard (`perfwatch dashboard`): `app.create_app` builds the ASGI app."""
