pub mod scripted;
